"""The instance's job index: `ls` shows running jobs and the newest finished ones whatever the
number of old jobs, `ls --all` every job, and folders made before the index are found."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from remote.core.layout import Root
from remote.jobs import index as jobindex
from tests.conftest import run_cli


def fake_job(root: Path, i: int, state: str) -> str:
    job_id = f"old{i:04d}-0101-x{i:04d}"
    d = root / "jobs" / job_id
    d.mkdir(parents=True)
    t = time.time() - 100_000 + i
    st = {"job_id": job_id, "name": f"old{i}", "project": "p", "state": state, "submitted_at": t, "attempt": 1}
    if state == "running":
        st.update(heartbeat=time.time() + 3600, supervisor_pid=os.getpid(), boot_id="")
    else:
        st["ended_at"] = t + 1
    (d / "status.json").write_text(json.dumps(st))
    (d / "spec.json").write_text(json.dumps({"name": f"old{i}", "run": "true"}))
    (d / "output.log").write_text("done\n")
    return job_id


def ls(*extra: str) -> dict:
    r = run_cli("ls", "--host", "local", "--json", *extra)
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


def test_ls_shows_running_and_newest_finished_jobs(tmp_path: Path) -> None:
    root = tmp_path / "local-root"
    ids = [fake_job(root, i, "running" if i == 3 else "succeeded") for i in range(45)]
    assert not (root / "jobs.index").exists()  # folders from before the index

    doc = ls()
    shown = [j["job_id"] for j in doc["jobs"]]
    assert shown == [ids[3]] + ids[-jobindex.RECENT:]  # the old running one, then the newest, in order
    assert doc["older"] == 45 - jobindex.RECENT - 1
    assert [j["job_id"] for j in ls("--all")["jobs"]] == ids and ls("--all")["older"] == 0

    # the finished jobs are known from the index now: an old folder is no longer read
    (root / "jobs" / ids[0] / "status.json").write_text("{damaged")
    assert [j["job_id"] for j in ls()["jobs"]] == shown

    # a resumed job shows again however old it is; a removed folder drops out
    jobindex.mark(Root(str(root)), [ids[1]], False)
    (root / "jobs" / ids[2] / "status.json").unlink()
    for p in (root / "jobs" / ids[2]).iterdir():
        p.unlink()
    (root / "jobs" / ids[2]).rmdir()
    doc = ls()
    assert [j["job_id"] for j in doc["jobs"]][:2] == [ids[1], ids[3]]
    assert ids[2] not in [j["job_id"] for j in ls("--all")["jobs"]]

    # names resolve through the index
    r = run_cli("status", "old44", "--host", "local", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["job_id"] == ids[44], r.stdout + r.stderr


def test_cost_counts_every_job_not_only_those_ls_shows(tmp_path: Path) -> None:
    root = tmp_path / "local-root"
    ids = [fake_job(root, i, "succeeded") for i in range(jobindex.RECENT + 5)]
    r = run_cli("cost", "--host", "local", "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    doc = json.loads(r.stdout)
    assert sorted(j["job_id"] for j in doc["jobs"]) == sorted(ids)
    assert doc["hosts"]["local"]["jobs"] == len(ids)


def test_a_job_submitted_again_under_its_id_is_not_known_finished(tmp_path: Path) -> None:
    """A job that moved away (finished here, marked done) and moved back is submitted again
    under the same id: the plain listing must show it however old it is."""
    root = Root(str(tmp_path / "r"))
    job_id = fake_job(root.root, 1, "running")
    jobindex.add(root, job_id, "old1", 1.0)
    jobindex.mark(root, [job_id], True)
    assert job_id in jobindex.read(root)[2]
    jobindex.add(root, job_id, "old1", 2.0)
    assert job_id not in jobindex.read(root)[2]
    assert job_id in jobindex.listing(root, recent=0)[0]
