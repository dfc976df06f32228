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
    return [m.step for m in _client(uri).get_metric_history(run_id, "loss")]


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
        assert steps == sorted(set(steps)) and steps[-1] == 30, steps  # by step, none twice
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
        wait_state("local", jid, ENDED, timeout=120)
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
