"""A shared sweep's driver starting (or resuming) beside another laptop's: it never judges a trial that
the other driver has just asked for and not yet marked as its own (two writes to the study)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import needs

needs("optuna")


def test_a_driver_leaves_a_trial_another_driver_has_just_asked_for(isolated: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import optuna

    from gpujob.usecases.experiments import record
    from gpujob.usecases.experiments.sweep import Driver

    # a driver counts cost at every look for the rest of its process (a sweep's); this worker goes on
    # to other tests, which expect the default back
    monkeypatch.setattr(record, "COST_EVERY_S", record.COST_EVERY_S)

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="shared", storage=storage)
    study.set_user_attr("sweep", {"method": "random", "trials": 4, "params": {"lr": {"low": 0.1, "high": 0.4}}})
    study.set_user_attr("job_file", str(tmp_path / "job.yaml"))
    other = optuna.load_study(study_name="shared", storage=storage)
    asked = other.ask()  # the other laptop's first write; its "laptop" mark is its next one
    theirs = other.ask()
    theirs.set_user_attr("laptop", "another-laptop")
    notes: list[str] = []
    Driver(object(), optuna.load_study(study_name="shared", storage=storage), notes.append).reattach()
    states = {t.number: t.state for t in optuna.load_study(study_name="shared", storage=storage).get_trials()}
    assert states == {asked.number: optuna.trial.TrialState.RUNNING, theirs.number: optuna.trial.TrialState.RUNNING}
    other.tell(asked, 0.5)  # the other driver's result is taken, not refused as already finished
    assert optuna.load_study(study_name="shared", storage=storage).trials[asked.number].value == 0.5
