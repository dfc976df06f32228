"""A damaged job record on the instance, and a supervisor killed before its job runs.

- A ``status.json`` or ``spec.json`` (or a ``jobs.index`` line) that no writer of ours produces
  (a hand edit, a damaged disk, another tool): readers did arithmetic on it, so one such job
  made ``ls``, ``status``, ``stop`` and ``resume`` fail for every job of the host, and the GPU
  queue of every other job's supervisor with them. Now damaged status fields are ignored, and
  what is still unreadable costs that job's line (its ``status`` names the damage).
- A supervisor killed (-9) while its job is still queued (in setup, or waiting for GPUs):
  ``stop`` waited its whole ``--wait`` (600 s) for it, and setup's processes, which did not
  carry the job's folder in their environment, outlived both ``stop`` and ``resume``.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.conftest import run_cli
from tests.helpers import remote_root, submit, wait_for, wait_state, write_job

DAMAGES = ['"x"', "[1, 2]", '{"state": "running", "heartbeat": "abc", "supervisor_pid": "x"}',
           '{"state": "succeeded", "attempts": 5, "diagnosis": 3}', '{"state": "running", "heartbeat": 1e400}',
           '{"state": ["r"], "submitted_at": "zz", "ended_at": [1], "attempt": 1e300}', '{"stat']


SPEC_DAMAGES = ['"x"', '{"name": 5, "price_per_hour": "abc", "checkpoint_keep": "x", "notify": "y", "gpus": "x"}']
INDEX_DAMAGES = ['garbage', '[1]', '{"id": 5, "t": 1}', '{"id": "../x", "t": "q"}', '{"id": "z", "t": 1e999}']


def test_a_damaged_status_record_costs_its_job_only(tmp_path: Path) -> None:
    good = submit("local", write_job(tmp_path, "good", "print('fine')", "python main.py"))["job_id"]
    bad = submit("local", write_job(tmp_path, "bad", "print('fine')", "python main.py"))["job_id"]
    root = remote_root(tmp_path, "local")
    wait_state("local", good, ("succeeded",), 60, root)
    wait_state("local", bad, ("succeeded",), 60, root)
    with (root / "jobs.index").open("a") as index:
        index.write("\n".join(INDEX_DAMAGES) + "\n")
    damages = [("status.json", d) for d in DAMAGES] + [("spec.json", d) for d in SPEC_DAMAGES]
    for name, damage in damages:
        (root / "jobs" / bad / name).write_text(damage)
        ls = run_cli("ls", "--host", "local", "--json")
        assert ls.returncode == 0, (damage, ls.stderr)
        assert {j["job_id"]: j["state"] for j in json.loads(ls.stdout)["jobs"]}.get(good) == "succeeded", damage
        for words in (["status", bad], ["stop", bad], ["tail", bad, "-n", "1"]):
            r = run_cli(*words, "--host", "local", "--json", timeout=60)
            assert "Traceback" not in r.stderr and "agent error" not in r.stderr, (damage, words, r.stderr)
            assert r.returncode in (0, 2, 4, 6), (damage, words, r.returncode, r.stderr)
            assert r.returncode == 0 or f"record of job {bad} is damaged" in r.stdout + r.stderr, (damage, r.stdout)


SLOW_SETUP = "echo setting-up; exec sleep 300"


def test_stop_after_the_supervisor_was_killed_in_setup_ends_at_once_and_leaves_nothing(tmp_path: Path) -> None:
    job = write_job(tmp_path, "setupkill", "print('never')", "python main.py", setup=SLOW_SETUP)
    doc = submit("local", job)
    job_id, sup = doc["job_id"], doc["supervisor_pid"]
    jd = remote_root(tmp_path, "local") / "jobs" / job_id

    def setup_pids() -> list[int]:
        out = []
        for d in Path("/proc").iterdir():
            try:
                if d.name.isdigit() and (d / "cmdline").read_bytes() == b"sleep\x00300\x00" \
                        and str(jd).encode() in (d / "environ").read_bytes():
                    out.append(int(d.name))
            except OSError:
                pass
        return out

    wait_for(lambda: "setting-up" in (jd / "output.log").read_text() if (jd / "output.log").exists() else False,
             60, "setup to start")
    orphans = setup_pids()
    assert orphans, "setup's process carries the job's folder in its environment"
    os.kill(sup, signal.SIGKILL)
    wait_for(lambda: not procs_of(sup), 10, "the supervisor to die")
    st = json.loads(run_cli("status", job_id, "--host", "local", "--json").stdout)
    assert st["state"] == "lost" and "still run" in st["lost_reason"], st  # at once, not 30 s later
    # before: the loop waited for a queued job's supervisor to show up, the whole --wait (600 s)
    r = run_cli("stop", job_id, "--host", "local", "--json", timeout=90)
    assert r.returncode in (0, 6), r.stderr
    assert json.loads(r.stdout)["state"] in ("stopped", "lost")
    wait_for(lambda: not setup_pids(), 20, "setup's process to end")


def procs_of(pid: int) -> bool:
    try:
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False


def test_a_job_cannot_replace_the_variables_its_processes_are_found_by(tmp_path: Path) -> None:
    """``env: {GPUJOB_JOB_DIR: ...}`` used to replace the job's identity in its processes: a
    ``stop`` then could not find a process that left the run command's tree (setsid), and it
    kept the GPU. Refused before anything is sent."""
    job = write_job(tmp_path, "reserved", "print('x')", "python main.py", env={"GPUJOB_JOB_DIR": "/tmp/elsewhere"},
                    secrets=["GPUJOB_JOB_ID"])
    r = run_cli("submit", str(job), "--host", "local")
    assert r.returncode == 2, r.stderr
    assert "env.GPUJOB_JOB_DIR: GPUJOB_JOB_DIR is set by gpujob" in r.stderr, r.stderr
    assert "GPUJOB_JOB_ID is set by gpujob" in r.stderr, r.stderr
    assert not (remote_root(tmp_path, "local") / "jobs").exists()
