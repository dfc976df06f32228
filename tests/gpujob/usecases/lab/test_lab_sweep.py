"""A sweep shared by several laptops (docs/experiments.md, "A lab's runs in one place"): one Optuna study
in the lab's PostgreSQL, each laptop submitting trials to its own host; every trial is one Optuna
trial and one ledger row; no laptop asks for more trials than the study has; the database's password
stays in the laptops' environment. A real PostgreSQL, two laptops as two state folders and roots."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.byo_helpers import QUIET
from tests.conftest import REPO, run_cli
from tests.gpujob.usecases.experiments.test_experiments import LOOP
from tests.helpers import needs, write_job
from tests.lab_servers import Postgres, postgres  # noqa: F401 - the module's database

needs("optuna", "psycopg")


def _laptop(tmp_path: Path, name: str) -> dict[str, str]:
    d = tmp_path / name
    return {"GPUJOB_CONFIG_DIR": str(d / "config"), "GPUJOB_STATE_DIR": str(d / "state"),
            "GPUJOB_CACHE_DIR": str(d / "cache"), "GPUJOB_LOCAL_ROOT": str(d / "root")}


def _json(env: dict[str, str], *args: str) -> dict:
    r = run_cli(*args, "--json", timeout=240, env_extra=env)
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


@pytest.mark.slow
def test_two_laptops_share_one_sweep_in_postgresql(tmp_path: Path, postgres: Postgres,  # noqa: F811
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", postgres.password)  # libpq's own variable: never in the job file
    monkeypatch.setenv("GPUJOB_SWEEP_POLL", "0.3")
    monkeypatch.setenv("GPUJOB_METRICS_EVERY", "0.2")
    sweep = {"method": "random", "trials": 4, "parallel": 1, "pruner": "none", "seed": 3, "storage": postgres.url,
             "params": {"lr": {"low": 0.05, "high": 0.4}}}
    job = write_job(tmp_path, "shared", LOOP, "python main.py --lr 0.1 --steps 6 --sleep 0.02", env=QUIET, sweep=sweep)
    laptops = {n: _laptop(tmp_path, n) for n in ("alice", "bob")}
    drivers = {n: subprocess.Popen([sys.executable, "-m", "gpujob.cli", "sweep", str(job), "--hosts", "local", "--json"],
                                   env=dict(os.environ, PYTHONPATH=str(REPO), **env), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True) for n, env in laptops.items()}
    docs = {}
    for n, p in drivers.items():
        out, err = p.communicate(timeout=400)
        assert p.returncode == 0, err + out
        docs[n] = json.loads(out)
    assert {d["sweep"] for d in docs.values()} == {"shared-sweep"}  # one study: laptops meet on the job's name

    # the whole study, as each laptop (and a third with --storage) reads it from the database
    seen = [_json(laptops["alice"], "sweep", "status", "shared-sweep"), _json(laptops["bob"], "sweep", "status", "shared-sweep"),
            _json(_laptop(tmp_path, "carol"), "sweep", "status", "shared-sweep", "--storage", postgres.url)]
    for doc in seen:
        assert len(doc["trials"]) == 4, doc["trials"]  # no laptop asked for more than the study has
        assert {t["state"] for t in doc["trials"]} == {"complete"}, doc["trials"]
    jobs = {t["job_id"] for t in seen[0]["trials"]}
    assert len(jobs) == 4 and all(jobs)
    # every trial is one ledger row, on the laptop that ran it; each laptop ran some
    rows = {n: {r["job_id"] for r in _json(env, "runs", "--sweep", "shared-sweep", "--limit", "0")["runs"]}
            for n, env in laptops.items()}
    assert rows["alice"] | rows["bob"] == jobs and not rows["alice"] & rows["bob"], rows
    best = min(t["value"] for t in seen[0]["trials"])
    assert all(doc["best"]["value"] == best for doc in seen)
    assert seen[2]["spent"]["steps"] == sum(t["steps"] for t in seen[0]["trials"])

    # the password: in no file either laptop or host holds (the storage each laptop noted has none)
    noted = json.loads((tmp_path / "alice" / "state" / "sweep-storages.json").read_text())
    assert noted == {"shared-sweep": postgres.url}
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not [p for p in files if postgres.password.encode() in p.read_bytes()]


def test_a_password_in_a_sweep_storage_is_refused_and_a_storage_that_is_down_is_said(tmp_path: Path) -> None:
    needs("optuna")
    job = write_job(tmp_path, "pw", LOOP, "python main.py", sweep={
        "params": {"lr": [0.1, 0.2]}, "storage": "postgresql://alice:hunter2@db.lab/sweeps"})
    r = run_cli("sweep", str(job), "--hosts", "local")
    assert r.returncode == 2 and "PGPASSWORD" in r.stderr and "hunter2" not in r.stderr + r.stdout, r.stderr
    assert "Traceback" not in r.stderr
    from tests.conftest import free_port

    down = write_job(tmp_path, "down", LOOP, "python main.py", sweep={
        "params": {"lr": [0.1, 0.2]}, "storage": f"postgresql://alice@127.0.0.1:{free_port()}/sweeps"})
    r = run_cli("sweep", str(down), "--hosts", "local", timeout=120)
    assert r.returncode == 2 and "could not be opened" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "local-root" / "jobs").exists() or not any((tmp_path / "local-root" / "jobs").iterdir())
