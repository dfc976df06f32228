"""Concurrent clients on one host: ten submits of one project each run their own code; three
resumes of one lost job leave one supervisor.

The supervisor killed (-9) while its job trains: the trainer it leaves behind is found, the
job reads ``lost`` at once (not after the heartbeat ages), and ``resume`` ends the orphan
before it starts the next attempt: one supervisor, one trainer, never two.

Two ``stop`` of one running job at once, with a ``resume`` racing them: both stops answer
``stopped`` (exit 0, no traceback), the resume is either refused ("already running") or
restarts the job afterwards, and the end is consistent: a stopped job has no process left, a
resumed one has one supervisor and one trainer.

Two ``gpujob move`` of one job to the same host at once (a person and ``gpujob guard``, or
two terminals): one moves it, the other is refused; the job that arrived is never deleted under
its running supervisor by the second arrival."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, run_cli
from tests.helpers import (
    job_processes,
    processes_with,
    remote_root,
    status,
    submit,
    wait_for,
    wait_state,
    write_job,
)


def cli(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "gpujob.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env=env)


def test_ten_concurrent_submits_each_run_their_own_code(ssh_host: str, tmp_path: Path) -> None:
    folders = []
    for i in range(10):
        d = tmp_path / f"c{i}"
        d.mkdir()
        (d / "w.py").write_text(f"print('I am number {i}')\n")
        # whole seconds apart: same-size edits within one second are change detection's case
        # (tests/gpujob/usecases/test_sync.py), not this one's
        os.utime(d / "w.py", (1_700_000_000 + i, 1_700_000_000 + i))
        (d / "job.yaml").write_text(json.dumps({"name": "conc", "run": "python w.py"}))
        folders.append(d / "job.yaml")
    procs = [cli("submit", str(f), "--host", ssh_host, "--json") for f in folders]
    ids = []
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, f"submit {i}: {err}{out}"
        ids.append(json.loads(out)["job_id"])
    root = remote_root(tmp_path, ssh_host)
    for i, job_id in enumerate(ids):
        st = wait_state(ssh_host, job_id, ("succeeded", "failed"), 120)
        assert st["state"] == "succeeded", st
        assert (root / "jobs" / job_id / "code" / "w.py").read_text() == f"print('I am number {i}')\n"
        assert f"I am number {i}\n" in (root / "jobs" / job_id / "output.log").read_text()


# a checkpoint on the first attempt, then every attempt says it is up and runs on
LONG_JOB = """
    import os, time
    if not os.environ["GPUJOB_RESUME"]:
        os.makedirs(os.path.join(os.environ["GPUJOB_CKPT_DIR"], "step-1"))
        open(os.path.join(os.environ["GPUJOB_CKPT_DIR"], "step-1", ".gpujob-complete"), "w").close()
    print("attempt", os.environ["GPUJOB_ATTEMPT"], "ready", flush=True)
    time.sleep(600)
"""


def supervisors(job_id: str) -> list[int]:
    return processes_with(b"run", job_id.encode(), b"remote")


def test_three_concurrent_resumes_start_one_supervisor(ssh_host: str, tmp_path: Path) -> None:
    job = write_job(tmp_path, "resume3", LONG_JOB, "python main.py")
    job_id = submit(ssh_host, job)["job_id"]
    jd = remote_root(tmp_path, ssh_host) / "jobs" / job_id
    wait_for(lambda: "ready" in (jd / "output.log").read_text() if (jd / "output.log").exists() else False, 60, "ready")
    st = status(ssh_host, job_id)
    os.kill(st["supervisor_pid"], signal.SIGKILL)  # the agent dies with the trainer: the job is lost
    for pid in job_processes(job_id):
        os.kill(pid, signal.SIGKILL)
    # the heartbeat ages past GPUJOB_STALE_AFTER (30 s by default; the record says so at once
    # once the supervisor's pid is gone and its lock is free)
    st = json.loads((jd / "status.json").read_text())
    st["heartbeat"] = time.time() - 3600
    (jd / "status.json").write_text(json.dumps(st))
    assert status(ssh_host, job_id)["state"] == "lost"
    try:
        procs = [cli("resume", job_id, "--host", ssh_host) for _ in range(3)]
        results = [(p.wait(120), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
        ok = [r for r in results if r[0] == 0]
        refused = [r for r in results if r[0] != 0]
        assert len(ok) == 1 and len(refused) == 2, results
        for _rc, _out, err in refused:
            assert "already running" in err and "Traceback" not in err
        wait_for(lambda: (jd / "output.log").read_text().count("ready") >= 2, 60, "the resumed attempt")
        assert len(supervisors(job_id)) == 1, supervisors(job_id)
        trainers = [p for p in job_processes(job_id) if b"main.py" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(trainers) == 1
    finally:
        end_job(job_id)


def end_job(job_id: str) -> None:
    """SIGKILL the job's supervisors and processes (a test's cleanup)."""
    for p in supervisors(job_id) + job_processes(job_id):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def _lock_waiters(lock: Path) -> list[int]:
    """Processes other than this one with ``lock`` open (a resume blocked on the job's lock)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if any(os.readlink(fd) == str(lock) for fd in (d / "fd").iterdir()):
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def test_a_resume_that_waited_for_rm_says_the_job_was_removed(tmp_path: Path) -> None:
    import fcntl
    import shutil

    job = write_job(tmp_path, "racerm", "import sys; sys.exit(3)", "python main.py")
    job_id = submit("local", job)["job_id"]
    wait_state("local", job_id, ("failed",), 60)
    jd = remote_root(tmp_path, "local") / "jobs" / job_id
    lock = jd / "job.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as `gpujob rm` holds it while it removes the folder
        p = cli("resume", job_id, "--host", "local")
        wait_for(lambda: bool(_lock_waiters(lock)) or p.poll() is not None, 60, "the resume waiting on the job's lock")
        assert p.poll() is None, p.communicate()
        shutil.rmtree(jd)
    finally:
        os.close(fd)
    out, err = p.communicate(timeout=60)
    assert p.returncode != 0, out
    assert "was removed" in err and "gpujob ls" in err and "Traceback" not in err, err
    assert not jd.exists()  # the resume did not make the folder again


def trainers(job_id: str) -> list[int]:
    out = []
    for p in job_processes(job_id):
        try:
            if b"main.py" in Path(f"/proc/{p}/cmdline").read_bytes():
                out.append(p)
        except OSError:
            pass
    return out


def test_a_killed_supervisor_leaves_one_trainer_after_resume(any_host: str, tmp_path: Path) -> None:
    job_id = submit(any_host, write_job(tmp_path, "orphan", LONG_JOB, "python main.py"))["job_id"]
    log = remote_root(tmp_path, any_host) / "jobs" / job_id / "output.log"
    wait_for(lambda: log.exists() and "attempt 1 ready" in log.read_text(), 60, "the first attempt")
    first = trainers(job_id)
    assert len(first) == 1
    try:
        os.kill(status(any_host, job_id)["supervisor_pid"], signal.SIGKILL)
        wait_for(lambda: not supervisors(job_id), 10, "the supervisor to die")
        st = status(any_host, job_id)
        assert st["state"] == "lost" and "still run" in st["lost_reason"], st
        r = run_cli("resume", job_id, "--host", any_host)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: "attempt 2 ready" in log.read_text(), 60, "the resumed attempt")
        assert len(supervisors(job_id)) == 1
        assert trainers(job_id) and first[0] not in trainers(job_id), (first, trainers(job_id))
        assert len(trainers(job_id)) == 1
    finally:
        end_job(job_id)


def test_two_stops_and_a_resume_at_once_end_consistently(tmp_path: Path) -> None:
    job_id = submit("local", write_job(tmp_path, "race", LONG_JOB, "python main.py"))["job_id"]
    log = remote_root(tmp_path, "local") / "jobs" / job_id / "output.log"
    wait_for(lambda: log.exists() and "attempt 1 ready" in log.read_text(), 60, "the first attempt")
    try:
        procs = [cli("stop", job_id, "--host", "local", "--json") for _ in range(2)] + [cli("resume", job_id, "--host", "local")]
        results = [(p.wait(120), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
        for rc, out, err in results[:2]:
            assert rc == 0 and json.loads(out)["state"] == "stopped", (rc, out, err)
        rc, out, err = results[2]
        assert "Traceback" not in err
        assert rc == 0 or "already running" in err, (rc, out, err)
        if rc == 0:  # it came after a stop had ended the job: the job runs again, once
            wait_for(lambda: "attempt 2 ready" in log.read_text(), 60, "the resumed attempt")
            assert status("local", job_id)["state"] == "running"
            assert len(supervisors(job_id)) == 1
            assert len(trainers(job_id)) == 1
        else:
            assert status("local", job_id)["state"] == "stopped"
            wait_for(lambda: not job_processes(job_id) and not supervisors(job_id), 20, "no process of the job")
    finally:
        end_job(job_id)


def test_two_moves_at_once_leave_one_running_job(ssh_host: str, tmp_path: Path) -> None:
    job_id = submit("local", write_job(tmp_path, "mv2", LONG_JOB, "python main.py", stop={"grace": 5}))["job_id"]
    log = remote_root(tmp_path, "local") / "jobs" / job_id / "output.log"
    wait_for(lambda: log.exists() and "attempt 1 ready" in log.read_text(), 60, "the first attempt")
    try:
        procs = [cli("move", job_id, "--to", ssh_host, "--json") for _ in range(2)]
        results = [(p.wait(180), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
        ok = [r for r in results if r[0] == 0]
        assert len(ok) == 1, results  # the project's sync lease lines the two adopts up
        refused = [r for r in results if r[0] != 0][0]
        said = refused[1] + refused[2]
        assert refused[0] == 2 and "Traceback" not in said, refused
        assert "already exists on this host" in said or "moved to" in said, refused
        new = remote_root(tmp_path, ssh_host) / "jobs" / job_id
        wait_for(lambda: (new / "output.log").exists() and "ready" in (new / "output.log").read_text(), 60,
                 "the job on the new host")
        st = json.loads((new / "status.json").read_text())
        assert st["state"] == "running", (st, results)
        assert len(supervisors(job_id)) == 1, results
        # the source's trainer may still be in its stop grace as the new one starts: one, once it ended
        wait_for(lambda: len(trainers(job_id)) == 1, 30, lambda: f"one trainer, not {trainers(job_id)}: {results}")
        assert (new / "code" / "main.py").exists()
    finally:
        end_job(job_id)
