"""The lab's MLflow (docs/experiments.md, "A lab's runs in one place"): every job becomes an MLflow run,
followed live from the laptop while gpujob reads it, exported once however often (and from however
many laptops) it is sent, and no MLflow credential reaches a host, an argv or a log. A real
``mlflow server`` on 127.0.0.1, real jobs over a real sshd, MLflow's own client reading back."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.byo_helpers import QUIET
from tests.conftest import run_cli
from tests.faults.linkproxy import LinkProxy
from tests.gpujob.usecases.experiments.test_experiments import LOOP
from tests.helpers import ENDED, needs, status, submit, wait_for, wait_state, write_job
from tests.lab_servers import MlflowServer, mlflow_server  # noqa: F401 - the module's server

needs("mlflow", "optuna")
pytestmark = pytest.mark.slow  # the server's first start migrates its database


def _client(uri: str) -> Any:
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _runs(uri: str, experiment: str) -> list[Any]:
    c = _client(uri)
    exp = c.get_experiment_by_name(experiment)
    return list(c.search_runs([exp.experiment_id])) if exp else []


def _finished(uri: str, experiment: str) -> Any:
    runs = _runs(uri, experiment)
    return runs[0] if len(runs) == 1 and runs[0].info.status != "RUNNING" and "loss" in runs[0].data.metrics else None


def _loss_steps(uri: str, run_id: str) -> list[int]:
    """The steps of the run's loss points, by step (the server gives them in the order they came)."""
    return sorted(m.step for m in _client(uri).get_metric_history(run_id, "loss"))


def _job(tmp_path: Path, name: str, steps: int = 30) -> Path:
    return write_job(tmp_path, name, LOOP, f"python main.py --lr 0.2 --steps {steps} --sleep 0.05", env=QUIET,
                     mlflow={"experiment": name})


def _json(*args: str, env: dict[str, str] | None = None) -> dict:
    r = run_cli(*args, "--json", timeout=240, env_extra=env)
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


def _copy_ledger(src: Path, dst_dir: Path) -> None:
    dst_dir.mkdir(parents=True)
    a, b = sqlite3.connect(str(src)), sqlite3.connect(str(dst_dir / "ledger.sqlite"))
    a.backup(b)
    a.close()
    b.close()


def _end_exporters(state: Path) -> None:
    """The detached exporter of a test's laptop, if it still lingers."""
    import signal

    try:
        pid = int((state / "mlflow-export.lock").read_text() or 0)
        if pid:
            os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        pass


def test_a_job_follows_into_mlflow_once_and_no_credential_reaches_the_host(
        tmp_path: Path, ssh_host: str, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    uri = mlflow_server.uri
    secret = "mlfpw-" + uuid.uuid4().hex
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", secret)  # the server has no auth: sent and ignored
    monkeypatch.setenv("GPUJOB_MLFLOW_LINGER", "2")
    name = "lab" + uuid.uuid4().hex[:6]
    jid = submit(ssh_host, _job(tmp_path, name))["job_id"]
    try:
        wait_state(ssh_host, jid, ENDED, timeout=120)
        st = status(ssh_host, jid)  # a look at the ended job: the ledger learns its end, the exporter follows
        assert st["state"] == "succeeded", st
        wait_for(lambda: _finished(uri, name), 180, "the run FINISHED in MLflow with its loss")
        run = _finished(uri, name)
        assert run.info.status == "FINISHED" and run.info.run_name == jid
        assert run.data.params["lr"] == "0.2" and run.data.params["steps"] == "30"
        tags = run.data.tags
        with sqlite3.connect(str(tmp_path / "state" / "ledger.sqlite")) as db:
            code_hash = db.execute("SELECT code_hash FROM runs WHERE job_id=?", (jid,)).fetchone()[0]
        assert tags["gpujob.job_id"] == jid and tags["gpujob.host"] == "box" and tags["gpujob.state"] == "succeeded"
        assert tags["gpujob.code_hash"] == code_hash and tags["gpujob.version"]
        steps = _loss_steps(uri, run.info.run_id)
        assert steps == list(range(1, 31)), steps  # every logged step, none twice
        assert run.data.metrics["loss"] == pytest.approx(st["latest_metrics"]["loss"])
        assert run.data.metrics["gpujob/gpu_hours"] > 0  # what the run used, beside its curves

        # exported again, from this laptop and from a second one holding the same run: nothing is added
        again = _json("runs", "export", "--mlflow")
        assert again["points"] == 0 and not again["pending"], again
        laptop2 = tmp_path / "laptop2"
        _copy_ledger(tmp_path / "state" / "ledger.sqlite", laptop2)
        other = _json("runs", "export", "--mlflow", uri, env={"GPUJOB_STATE_DIR": str(laptop2)})
        assert other["exported"] == 1 and other["points"] == 0, other
        assert len(_runs(uri, name)) == 1 and _loss_steps(uri, run.info.run_id) == steps

        # the colleague's laptop lists the run from the server and compares it with a run of its own
        lab = _json("runs", "--from", "mlflow", "--name", name, env={"GPUJOB_STATE_DIR": str(tmp_path / "laptop3")})
        assert [(r["job_id"], r["source"]) for r in lab["runs"]] == [(jid, "mlflow")]
        assert lab["runs"][0]["params"]["lr"] == 0.2
    finally:
        _end_exporters(tmp_path / "state")

    # the credential: on no host file, in no process's argv, in no file gpujob wrote, in no host process's env
    host_files = [p for p in (tmp_path / "remote-root").rglob("*") if p.is_file()]
    assert host_files and not [p for p in host_files if secret.encode() in p.read_bytes()]
    ours = [p for p in (tmp_path / "state").rglob("*") if p.is_file()] + [mlflow_server.folder / "server.log"]
    assert not [p for p in ours if secret.encode() in p.read_bytes()]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes()
            assert secret.encode() not in argv, argv
            if str(tmp_path / "remote-root").encode() in argv:  # the host's agent and job processes
                assert secret.encode() not in (proc / "environ").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass


def test_a_server_that_is_down_is_said_once_and_the_runs_go_when_it_answers(
        tmp_path: Path, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    link = LinkProxy(int(mlflow_server.uri.rsplit(":", 1)[1]))
    link.cut()  # the lab's server is away
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{link.port}")
        monkeypatch.setenv("GPUJOB_MLFLOW_LINGER", "1")
        name = "down" + uuid.uuid4().hex[:6]
        jid = submit("local", _job(tmp_path, name, steps=10))["job_id"]
        monkeypatch.setenv("GPUJOB_MLFLOW_FOLLOW", "0")  # the wait's own status must not be the look that says it
        wait_state("local", jid, ENDED, timeout=120)
        monkeypatch.delenv("GPUJOB_MLFLOW_FOLLOW")
        failed = tmp_path / "state" / "mlflow-export.failed"
        wait_for(failed.exists, 120, "the exporter noting that the server did not answer")
        said = [run_cli("status", jid) for _ in range(2)]
        assert [r.returncode for r in said] == [0, 0], said[0].stderr
        told = [r.stderr.count("did not take the runs") for r in said]
        assert told == [1, 0], [r.stderr for r in said]
        assert "http://127.0.0.1" in said[0].stderr and "Traceback" not in said[0].stderr
        assert _runs(mlflow_server.uri, name) == []

        link.resume()  # back: the next look sends what waited
        assert run_cli("ls").returncode == 0
        wait_for(lambda: _finished(mlflow_server.uri, name), 180, "the waiting run exported once the server answered")
        wait_for(lambda: not failed.exists(), 60, "the failure note cleared")
        run = _finished(mlflow_server.uri, name)
        assert run.info.status == "FINISHED" and _loss_steps(mlflow_server.uri, run.info.run_id)[-1] == 10
    finally:
        _end_exporters(tmp_path / "state")
        link.close()


def test_a_password_in_a_tracking_uri_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    job = write_job(tmp_path, "pw", LOOP, "python main.py", mlflow={"tracking_uri": "http://alice:hunter2@mlflow.lab:5000"})
    r = run_cli("submit", str(job), "--host", "local")
    assert r.returncode == 2 and "MLFLOW_TRACKING_PASSWORD" in r.stderr and "hunter2" not in r.stderr + r.stdout
    assert not (tmp_path / "local-root" / "jobs").exists() or not any((tmp_path / "local-root" / "jobs").iterdir())
    shutil.rmtree(tmp_path / "pw")


def _all_runs(uri: str, experiment: str) -> list[Any]:
    """The experiment's runs, deleted ones too."""
    from mlflow.entities import ViewType

    c = _client(uri)
    exp = c.get_experiment_by_name(experiment)
    return list(c.search_runs([exp.experiment_id], run_view_type=ViewType.ALL)) if exp else []


def _run_of(uri: str, experiment: str, jid: str) -> Any:
    return next((r for r in _all_runs(uri, experiment) if r.data.tags.get("gpujob.job_id") == jid), None)


FOLLOW = {"GPUJOB_MLFLOW_FOLLOW": "1"}  # a command that starts the exporter and says what it noted


def _lab(monkeypatch: pytest.MonkeyPatch, uri: str, prefix: str) -> str:
    """This laptop's runs go to ``uri``: by hand, or by the exporter after a command given FOLLOW (no
    other command starts it or says its notes); a unique experiment name."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("GPUJOB_MLFLOW_LINGER", "1")
    monkeypatch.setenv("GPUJOB_MLFLOW_FOLLOW", "0")
    return prefix + uuid.uuid4().hex[:6]


def _ended_here(tmp_path: Path, jid: str) -> bool:
    """The job ended, read from its status.json on the local host (no command that would say the notes)."""
    try:
        return json.loads((tmp_path / "local-root" / "jobs" / jid / "status.json").read_text())["state"] in ENDED
    except (OSError, ValueError, KeyError):
        return False


def _status_of(uri: str, experiment: str, jid: str) -> str | None:
    run = _run_of(uri, experiment, jid)
    return run.info.status if run else None


def _exporter_left(state: Path) -> bool:
    """The detached exporter has run and left (its lock is there and nobody holds it)."""
    from gpujob.usecases.lab.follow import LOCK
    from remote.core.filelock import held

    return (state / LOCK).exists() and not held(state / LOCK)


def test_a_run_deleted_on_the_server_is_left_deleted_said_once_and_blocks_no_other_run(
        tmp_path: Path, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    uri = mlflow_server.uri
    name = _lab(monkeypatch, uri, "tidy")
    held = write_job(tmp_path, name, LOOP, "python main.py --steps 6 --sleep 0.05 --hold-at 3 --hold-s 600",
                     env=QUIET, mlflow={"experiment": name})
    a = json.loads(run_cli("submit", str(held), "--host", "local", "--json", env_extra=FOLLOW).stdout)["job_id"]
    try:
        wait_for(lambda: _run_of(uri, name, a), 120, "job A's run made by the exporter after submit")
        run_a = _run_of(uri, name, a).info.run_id
        # submit's exporter gone first (a slow round under load would otherwise meet the deletion itself,
        # and the look below, not the command after it, would say it)
        wait_for(lambda: _exporter_left(tmp_path / "state"), 60, "submit's exporter done")
        _client(uri).delete_run(run_a)  # someone tidies up the lab's MLflow while A runs
        assert run_cli("stop", a, "--host", "local").returncode == 0
        wait_for(lambda: _ended_here(tmp_path, a), 120, "job A stopped")
        assert status("local", a)["state"] in ENDED  # the ledger learns A's end: A's run has news to take
        shutil.rmtree(tmp_path / name)
        b = submit("local", _job(tmp_path, name, steps=8))["job_id"]
        wait_for(lambda: _ended_here(tmp_path, b), 120, "job B ended")
        look = run_cli("status", b, "--json", env_extra=FOLLOW)  # the first look at B's end starts the exporter
        assert look.returncode == 0 and json.loads(look.stdout)["state"] == "succeeded", look.stderr

        # B, submitted after, gets its run; A's run is not made again
        wait_for(lambda: _status_of(uri, name, b) == "FINISHED", 120, "job B's run FINISHED in MLflow")
        wait_for(lambda: _exporter_left(tmp_path / "state"), 60, "the exporter's round done")
        assert [r.data.tags["gpujob.job_id"] for r in _runs(uri, name)] == [b]
        assert "deleted" not in look.stderr
        assert _client(uri).get_run(run_a).info.lifecycle_stage == "deleted"
        assert _loss_steps(uri, _run_of(uri, name, b).info.run_id)[-1] == 8

        # the next command names A's deleted run once; the one after says nothing
        said = [run_cli("ls", env_extra=FOLLOW) for _ in range(2)]
        assert [r.returncode for r in said] == [0, 0], said[0].stderr
        told = [r.stderr.count("was deleted") for r in said]
        assert told == [1, 0], [r.stderr for r in said]
        assert a in said[0].stderr and "Traceback" not in said[0].stderr

        # an export by hand goes past it: exit 0, nothing said anew, A left deleted, no new run
        doc = _json("runs", "export", "--mlflow")
        assert not doc["pending"] and doc["refused"] == [] and doc["left"] == 1, doc
        assert [r.data.tags["gpujob.job_id"] for r in _runs(uri, name)] == [b]
        assert _client(uri).get_run(run_a).info.lifecycle_stage == "deleted"

        # restored in MLflow: the next export by hand brings A's run up to date (its end, its points)
        _client(uri).restore_run(run_a)
        doc = _json("runs", "export", "--mlflow")
        assert doc["refused"] == [] and doc["left"] == 0, doc
        assert {r.data.tags["gpujob.job_id"] for r in _runs(uri, name)} == {a, b}
        from gpujob.usecases.lab.export import STATUS

        assert _status_of(uri, name, a) == STATUS[status("local", a)["state"]]
        assert _loss_steps(uri, run_a)[-1] == 3  # held at step 3, then stopped
    finally:
        _end_exporters(tmp_path / "state")


def test_a_deleted_experiment_leaves_its_jobs_out_until_it_is_restored(
        tmp_path: Path, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    uri = mlflow_server.uri
    name = _lab(monkeypatch, uri, "gone")
    x = submit("local", _job(tmp_path, name, steps=3))["job_id"]
    wait_state("local", x, ENDED, timeout=120)
    assert _json("runs", "export", "--mlflow")["exported"] == 1
    c = _client(uri)
    exp_id = c.get_experiment_by_name(name).experiment_id
    c.delete_experiment(exp_id)  # the lab tidies up a whole experiment
    shutil.rmtree(tmp_path / name)
    y = submit("local", _job(tmp_path, name, steps=3))["job_id"]
    wait_state("local", y, ENDED, timeout=120)

    first = run_cli("runs", "export", "--mlflow")
    assert first.returncode == 0, first.stderr
    assert first.stderr.count(f"the experiment {name} of {y} was deleted") == 1, first.stderr
    again = _json("runs", "export", "--mlflow")
    assert again["left"] == 1 and again["refused"] == [] and again["exported"] == 0, again
    assert _run_of(uri, name, y) is None

    c.restore_experiment(exp_id)
    back = _json("runs", "export", "--mlflow")
    assert back["left"] == 0 and back["exported"] == 1, back
    assert _status_of(uri, name, y) == "FINISHED" and _loss_steps(uri, _run_of(uri, name, y).info.run_id)[-1] == 3


ODD_STEP = """
    print("step 1 loss 2.0", flush=True)
    print("step 100000000000000000000 loss 1.0", flush=True)  # past MLflow's 64-bit steps
"""


def test_a_run_mlflow_cannot_take_is_named_and_the_runs_after_it_go(
        tmp_path: Path, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    uri = mlflow_server.uri
    name = _lab(monkeypatch, uri, "odd")
    odd = submit("local", write_job(tmp_path, name, ODD_STEP, "python main.py", env=QUIET,
                                    mlflow={"experiment": name}))["job_id"]
    wait_state("local", odd, ENDED, timeout=120)
    shutil.rmtree(tmp_path / name)
    good = submit("local", _job(tmp_path, name, steps=4))["job_id"]
    wait_state("local", good, ENDED, timeout=120)

    for _ in range(2):  # the refused run is tried again at each export, and said
        r = run_cli("runs", "export", "--mlflow")
        assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
        assert f"refused the run of {odd}" in r.stderr and "out of range" in r.stderr, r.stderr
        assert _status_of(uri, name, good) == "FINISHED" and _loss_steps(uri, _run_of(uri, name, good).info.run_id) \
            == [1, 2, 3, 4]


def test_a_password_in_mlflow_tracking_uri_reaches_no_file_through_the_detached_exporter(
        tmp_path: Path, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    secret = "mlfpw-" + uuid.uuid4().hex
    with_pw = mlflow_server.uri.replace("http://", f"http://alice:{secret}@")
    name = _lab(monkeypatch, with_pw, "pwenv")  # the server has no auth: it would take the runs
    try:
        sub = run_cli("submit", str(_job(tmp_path, name, steps=5)), "--host", "local", "--json", env_extra=FOLLOW)
        assert sub.returncode == 0 and secret not in sub.stderr + sub.stdout, sub.stderr
        jid = json.loads(sub.stdout)["job_id"]
        wait_for(lambda: _exporter_left(tmp_path / "state"), 120, "the detached exporter's round after submit")
        wait_state("local", jid, ENDED, timeout=120)
        _no_secret_under(tmp_path, secret, name)
        said = [run_cli("ls", env_extra=FOLLOW) for _ in range(2)]  # the next command says it, once
        assert [r.returncode for r in said] == [0, 0], said[0].stderr
        assert [r.stderr.count("holds a password") for r in said] == [1, 0], [r.stderr for r in said]
        told = said[0].stderr
        assert "alice:***@" in told and "MLFLOW_TRACKING_PASSWORD" in told and "Traceback" not in told
        assert not [r for r in said if secret in r.stderr + r.stdout]
        assert _runs(mlflow_server.uri, name) == []  # nothing sent with it
    finally:
        _end_exporters(tmp_path / "state")
    _no_secret_under(tmp_path, secret, name)


def _no_secret_under(tmp_path: Path, secret: str, project: str) -> None:
    """No file of the test's gpujob folders (state, config, cache, the host's root) holds ``secret``."""
    written = [p for p in tmp_path.rglob("*") if p.is_file() and project not in p.parts]
    assert [p for p in written if "state" in p.parts]
    assert not [p for p in written if secret.encode() in p.read_bytes()]


NAN_LOOP = """
    import time
    for step, loss in enumerate(["2.5", "1.5", "nan", "inf", "-inf", "nan"], 1):
        print(f"step {step} loss {loss}", flush=True)
        time.sleep(0.05)
"""


def test_nan_and_inf_losses_reach_mlflow_as_it_shows_them_and_are_sent_once(
        tmp_path: Path, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    import math

    uri = mlflow_server.uri
    monkeypatch.setenv("GPUJOB_MLFLOW_FOLLOW", "0")  # the export by hand below is the only one
    name = "nan" + uuid.uuid4().hex[:6]
    jid = submit("local", write_job(tmp_path, name, NAN_LOOP, "python main.py", env=QUIET,
                                    mlflow={"tracking_uri": uri, "experiment": name}))["job_id"]
    wait_state("local", jid, ENDED, timeout=120)
    st = status("local", jid)
    assert st["state"] in ENDED, st
    doc = _json("runs", "export", "--mlflow", uri)
    assert doc["exported"] == 1, doc
    (run,) = _runs(uri, name)
    hist = {m.step: m.value for m in _client(uri).get_metric_history(run.info.run_id, "loss")}
    big = 1.7976931348623157e308  # MLflow's SQL store keeps ±inf as ±the largest float
    assert hist[1] == 2.5 and hist[2] == 1.5 and math.isnan(hist[3]) and math.isnan(hist[6]), hist
    assert hist[4] in (math.inf, big) and hist[5] in (-math.inf, -big), hist
    assert len(_client(uri).get_metric_history(run.info.run_id, "loss")) == 6

    # sent once: again from this laptop, and from a second one that reads what the server holds
    again = _json("runs", "export", "--mlflow", uri)
    assert again["points"] == 0, again
    laptop2 = tmp_path / "laptop2"
    _copy_ledger(tmp_path / "state" / "ledger.sqlite", laptop2)
    other = _json("runs", "export", "--mlflow", uri, env={"GPUJOB_STATE_DIR": str(laptop2)})
    assert other["exported"] == 1 and other["points"] == 0, other
    assert len(_client(uri).get_metric_history(run.info.run_id, "loss")) == 6


def test_a_run_followed_live_and_seen_ended_by_ls_alone_ends_whole_in_the_ledger_and_in_mlflow(
        tmp_path: Path, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A look while it runs sends MLflow the points it read (60 spread over the run so far); the end,
    seen by ``ls`` alone, brings the ledger to the final loss and MLflow to every logged step."""
    import re

    from tests.byo_helpers import job_dir, log_text

    uri = mlflow_server.uri
    name = _lab(monkeypatch, uri, "whole")
    steps, held = 120, 70
    jid = submit("local", write_job(tmp_path, name, LOOP, f"python main.py --lr 0.05 --steps {steps} --sleep 0.01 "
                                    f"--hold-at {held} --hold-s 8", env=QUIET, mlflow={"experiment": name}))["job_id"]
    jd = job_dir(tmp_path, "local", jid)
    wait_for(lambda: f"step {held} " in log_text(jd), 60, f"the job at step {held}")
    assert run_cli("status", jid, env_extra=FOLLOW).returncode == 0  # the live look: its points go to MLflow
    wait_for(lambda: (r := _run_of(uri, name, jid)) is not None and "loss" in r.data.metrics, 120,
             "the running job's points in MLflow")
    live = _loss_steps(uri, _run_of(uri, name, jid).info.run_id)
    assert 0 < len(live) < held, live  # what one look read (spread over the run, or its newest line): not every step

    wait_for(lambda: _ended_here(tmp_path, jid), 120, "the job's end")
    assert run_cli("ls", env_extra=FOLLOW).returncode == 0  # the only look that sees it ended
    logged = [float(v) for v in re.findall(r"^step \d+ loss ([\d.]+)$", log_text(jd), re.M)]
    (row,) = _json("runs", "--name", name)["runs"]
    assert row["state"] == "succeeded" and row["final"]["step"] == steps, row
    assert row["final"]["loss"] == pytest.approx(logged[-1]) and row["best"]["loss"] <= row["final"]["loss"], row
    assert row["directions"]["loss"] == "minimize", row
    shown = run_cli("runs", "--name", name, env_extra={"COLUMNS": "160"}).stdout.splitlines()
    assert shown[0].split()[-5:] == ["BEST", "LOSS", "LAST", "LOSS", "COST"], shown
    assert f"{logged[-1]:.4g}" in shown[1], shown

    run_id = _run_of(uri, name, jid).info.run_id
    wait_for(lambda: _loss_steps(uri, run_id) == list(range(1, steps + 1)) and _status_of(uri, name, jid) == "FINISHED",
             180, "every logged step in MLflow, the run FINISHED")
    hist = _client(uri).get_metric_history(run_id, "loss")
    assert sorted(m.value for m in hist) == pytest.approx(sorted(logged))
    wait_for(lambda: _exporter_left(tmp_path / "state"), 60, "the detached exporter done")
    again = _json("runs", "export", "--mlflow")
    assert again["points"] == 0, again  # each step once
    assert len(_client(uri).get_metric_history(run_id, "loss")) == steps
