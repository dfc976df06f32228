"""A client killed at any point of a submit leaves no half job, and the next submit of the
project goes through (the killed one's sync lease expires).

Ctrl-C says what state things are in: during a submit's upload, nothing was submitted and the
next submit resumes; the exit is 130 and stderr is one clear line, never empty."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.helpers import wait_for, wait_state, write_job
from tests.remote.host.test_preflight import QUICK


def test_a_client_killed_mid_submit_leaves_every_job_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUJOB_SYNC_LEASE_TTL", "2")  # the local agent inherits the environment
    d = tmp_path / "proj"
    d.mkdir()
    for i in range(40):
        (d / f"f{i}.bin").write_bytes(os.urandom(100_000))
    (d / "job.yaml").write_text(json.dumps({"name": "killed", "run": "python w.py"}))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    rng = random.Random(7)
    for n in range(6):
        (d / "w.py").write_text(f"print('version {n}')\n")
        os.utime(d / "w.py", (1_700_000_000 + n, 1_700_000_000 + n))
        p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "submit", str(d / "job.yaml"), "--json"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        time.sleep(rng.uniform(0.3, 1.5))
        p.send_signal(signal.SIGKILL)
        p.wait()
    (d / "w.py").write_text("print('the final version')\n")
    os.utime(d / "w.py", (1_700_000_100, 1_700_000_100))
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", "submit", str(d / "job.yaml"), "--json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    final = json.loads(r.stdout)["job_id"]
    jobs = tmp_path / "local-root" / "jobs"
    for jd in jobs.iterdir():  # every job folder is a whole job that ran its own version to the end
        st = wait_state("local", jd.name, ("succeeded", "failed"), 60)
        assert st["state"] == "succeeded", st
        version = (jd / "code" / "w.py").read_text()
        assert version.split("'")[1] in (jd / "output.log").read_text()
    assert "the final version" in (jobs / final / "output.log").read_text()


def test_ctrl_c_in_submits_upload_says_nothing_was_submitted(tmp_path: Path, ssh_host: str) -> None:
    job = write_job(tmp_path, "upl", "print('hi')", "python main.py")
    with open(job.parent / "weights.bin", "wb") as f:
        f.write(os.urandom(192 << 20))
    projects = tmp_path / "remote-root" / "projects"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "submit", str(job), "--host", ssh_host],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)
    try:
        def uploading() -> bool:  # the large file's part (or ranged sidecar) is there: the upload is under way
            return projects.is_dir() and any(".part" in q.name or q.name.startswith(".gpujob")
                                             for q in projects.rglob("*"))
        wait_for(uploading, 60, "the upload to start", interval=0.01)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130, out + err
    assert "interrupted during the upload to box: nothing was submitted" in err, err
    assert "the next gpujob submit resumes the upload" in err and "Traceback" not in err, err
    r = run_cli("ls", "--host", ssh_host, "--json")
    assert r.returncode == 0 and '"jobs": []' in r.stdout, r.stdout


@pytest.mark.slow
def test_move_runs_a_due_preflight_and_ctrl_c_says_where_the_job_stands(tmp_path: Path, ssh_host: str) -> None:
    release = tmp_path / "release"
    job = write_job(tmp_path, "mv", f"""
        import os, time
        while not os.path.exists({str(release)!r}):
            time.sleep(0.05)
    """, "python main.py")
    with open(job.parent / "weights.bin", "wb") as f:
        f.write(os.urandom(192 << 20))
    r = run_cli("submit", str(job), "--host", "local", "--json")
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    projects = tmp_path / "remote-root" / "projects"
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUJOB_PREFLIGHT="1", **QUICK)  # box was never measured: due
    p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "move", job_id, "--to", ssh_host],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)
    try:
        def uploading() -> bool:
            return projects.is_dir() and any(".part" in q.name or q.name.startswith(".gpujob")
                                             for q in projects.rglob("*"))
        wait_for(uploading, 90, "the move's upload to start", interval=0.01)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    said = " ".join(err.split())
    assert p.returncode == 130 and f"preflight of {ssh_host}" in out + err, out + err  # before the old job stops
    assert f"move interrupted: {job_id} is stopped on local (its checkpoints there untouched) and may not have " \
           f"started on {ssh_host}" in said and "Traceback" not in err, err
    assert f"gpujob move {job_id} --to {ssh_host} again resumes" in said, err

    # resume --host runs the preflight too when it is due again (the host was powered on since)
    from gpujob.config.hosts import HostStore

    store = HostStore()
    box = store.get(ssh_host)
    assert box.bench is not None  # the move's preflight was kept
    measured = float(box.bench["at"])
    box.powered_on_at = measured + 1
    store.save(box)
    release.write_text("")
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", "resume", job_id, "--host", ssh_host, "--json"],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env, timeout=300)
    assert r.returncode == 0 and json.loads(r.stdout)["to"] == ssh_host, r.stdout + r.stderr
    assert float((HostStore().get(ssh_host).bench or {}).get("at") or 0) > measured  # measured again
