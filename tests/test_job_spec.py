"""remote/core/spec.py: spec.json read once, typed, with each default stated in one place."""

from __future__ import annotations

from gpujob.bundle import import_remote

spec = import_remote("core.spec")


def test_an_empty_or_unreadable_spec_reads_as_the_defaults() -> None:
    for doc in (None, {}, [], "spec"):
        s = spec.JobSpec.of(doc)
        assert (s.name, s.run, s.python, s.launcher, s.stop_mode) == ("", "", "", spec.LAUNCHER, spec.STOP_MODE)
        assert s.stop_grace == spec.STOP_GRACE and s.checkpoint_keep == spec.CHECKPOINT_KEEP
        assert s.retry.max_restarts == 0 and s.retry.on == list(spec.RETRY_ON) and s.retry.backoff == spec.RETRY_BACKOFF
        assert s.checkpoint_backup and s.runtime_auto and s.host_env == {} and s.env == {} and s.data == []


def test_a_value_of_the_wrong_shape_becomes_the_default_at_the_door() -> None:
    s = spec.JobSpec({"name": 7, "host_env": ["x"], "env": {"N": 3, "GONE": None}, "retry": "often",
                      "stop_grace": "soon", "checkpoint_keep": True, "gpus": True, "data": ["a", 3, None],
                      "autostop": "yes", "checkpoint_backup": 0, "runtime_auto": None})
    assert s.name == "" and s.host_env == {} and s.env == {"N": "3"} and s.retry.max_restarts == 0
    assert s.stop_grace == spec.STOP_GRACE and s.checkpoint_keep == spec.CHECKPOINT_KEEP and s.gpus is None
    assert s.data == ["a"] and s.autostop == {}
    assert s.checkpoint_backup and s.runtime_auto  # only an explicit false turns either off


def test_what_the_laptop_writes_reads_back_whole() -> None:
    doc = {"name": "gpt", "run": "python train.py", "python": " venv ", "gpus": "0,1", "stop_grace": 30,
           "stop_mode": "checkpoint", "stop_max_wait": 600, "checkpoint_keep": 0, "checkpoint_pattern": "ckpt-*.pt",
           "retry": {"max_restarts": 2, "on": ["error"], "backoff": 1, "on_oom": "halve_batch", "move_after": 60},
           "host_env": {"GPUJOB_PATH_PREFIX": "/opt/bin"}, "checkpoint_backup": False, "runtime_auto": False}
    s = spec.JobSpec.of(doc)
    assert spec.JobSpec.of(s) is s
    assert (s.python, s.gpus, s.stop_grace, s.stop_mode, s.stop_max_wait) == ("venv", "0,1", 30.0, "checkpoint", 600.0)
    assert (s.retry.max_restarts, s.retry.on, s.retry.backoff, s.retry.on_oom, s.retry.move_after) == (
        2, ["error"], 1.0, "halve_batch", 60.0)
    assert s.checkpoint_keep == 0 and s.path_prefix == "/opt/bin" and not s.checkpoint_backup and not s.runtime_auto
    assert s.to_dict() == doc and s.with_values(allocated="1").allocated == "1" and s.allocated is None
