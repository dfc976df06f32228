"""The one liveness rule (remote/core/liveness.py) against real processes: a supervisor that runs,
one killed, a reboot (another boot id), a stale heartbeat, a queued job not yet named, a lock held,
a lost job whose trainer goes on; and the job record's door (remote/core/jobrecord.py)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote.core.jobrecord import JobRecord
from remote.core.layout import JobDir, Root
from remote.core.liveness import liveness
from remote.jobs import store

BOOT = "boot-a"


@pytest.fixture(autouse=True)
def _stale_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUJOB_STALE_AFTER", "30")


@pytest.fixture
def job(tmp_path: Path) -> JobDir:
    root = Root(str(tmp_path / "root"))
    j = root.job("train-0101-abcde")
    j.path.mkdir(parents=True)
    return j


def start(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A real process carrying the job's variables, as a supervisor or a trainer does."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=dict(os.environ, **env))


@pytest.fixture
def supervisor(job: JobDir) -> Iterator[subprocess.Popen[bytes]]:
    p = start({"GPUJOB_JOB_ID": job.id})
    yield p
    p.kill()
    p.wait()


def record(job: JobDir, **fields: object) -> JobRecord:
    rec = JobRecord(dict({"job_id": job.id, "state": "running", "boot_id": BOOT, "heartbeat": time.time()}, **fields))
    job.write_record(rec)
    return job.record()


def test_a_running_supervisor_keeps_its_job_alive(job: JobDir, supervisor: subprocess.Popen[bytes]) -> None:
    v = liveness(job, record(job, supervisor_pid=supervisor.pid), BOOT)
    assert v.lives and not v.lost and v.runs and not v.silent and v.state == "running"
    assert v.holds_gpus and v.working and v.left() == []


def test_a_silent_supervisor_lives_and_is_named_silent(job: JobDir, supervisor: subprocess.Popen[bytes]) -> None:
    v = liveness(job, record(job, supervisor_pid=supervisor.pid, heartbeat=time.time() - 1000), BOOT)
    assert v.lives and v.silent and v.stale and v.state == "running"


def test_a_killed_supervisor_is_lost_at_once(job: JobDir, supervisor: subprocess.Popen[bytes]) -> None:
    supervisor.kill()
    supervisor.wait()
    v = liveness(job, record(job, supervisor_pid=supervisor.pid), BOOT)  # a fresh heartbeat: no wait for it to age
    assert v.lost and not v.lives and v.state == "lost" and not v.holds_gpus
    assert v.lost_reason == "the agent is gone (stale heartbeat)"
    st = store.live_status(Root(str(job.path.parent.parent)), job, BOOT)
    assert st.state == "lost" and st.lost_reason == v.lost_reason


def test_a_pid_given_to_another_process_is_no_supervisor(job: JobDir, tmp_path: Path) -> None:
    other = start({"GPUJOB_JOB_ID": "someone-else"})
    try:
        v = liveness(job, record(job, supervisor_pid=other.pid), BOOT)
        assert not v.runs and v.lost
    finally:
        other.kill()
        other.wait()


def test_another_boot_means_lost_even_where_the_pid_lives(job: JobDir, supervisor: subprocess.Popen[bytes]) -> None:
    v = liveness(job, record(job, supervisor_pid=supervisor.pid), "boot-b")
    assert v.lost and v.rebooted and v.lost_reason == "the instance rebooted" and v.left() == []


def test_a_queued_job_without_a_named_supervisor(job: JobDir) -> None:
    fresh = liveness(job, record(job, state="queued"), BOOT)
    assert fresh.lives and fresh.starting and not fresh.lost  # its supervisor is on its way
    stale = liveness(job, record(job, state="queued", heartbeat=time.time() - 1000), BOOT)
    assert stale.lost and stale.starting  # stop still waits for it; a reader sees it lost


def test_a_held_lock_keeps_an_unnamed_supervisor_alive(job: JobDir) -> None:
    fd = os.open(str(job.path / "supervisor.lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        v = liveness(job, record(job, heartbeat=time.time() - 1000), BOOT)
        assert v.locked and not v.lost and v.lives
        ended = liveness(job, record(job, state="succeeded"), BOOT)
        assert ended.locked and not ended.lives  # resume waits for an ending supervisor's last upload
    finally:
        os.close(fd)
    assert liveness(job, record(job, heartbeat=time.time() - 1000), BOOT).lost


def test_a_lost_job_whose_trainer_goes_on(job: JobDir) -> None:
    trainer = start({"GPUJOB_JOB_ID": job.id, "GPUJOB_JOB_DIR": str(job.path)})
    try:
        deadline = time.monotonic() + 10
        while b"GPUJOB_JOB_DIR" not in Path(f"/proc/{trainer.pid}/environ").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        v = liveness(job, record(job, heartbeat=time.time() - 1000), BOOT)
        assert v.lost and v.left() == [trainer.pid] and v.working
        assert v.lost_reason is not None and "1 process(es) of the job still run" in v.lost_reason
        kept = liveness(job, record(job, state="lost", lost_reason="x"), BOOT)  # recorded lost: rm still refuses
        assert kept.working and kept.left() == [trainer.pid] and kept.lost_reason == "x"
    finally:
        trainer.kill()
        trainer.wait()
    assert not liveness(job, record(job, state="lost"), BOOT).working


def test_mark_lost_persists_the_verdict(job: JobDir, supervisor: subprocess.Popen[bytes]) -> None:
    root = Root(str(job.path.parent.parent))
    supervisor.kill()
    supervisor.wait()
    record(job, supervisor_pid=supervisor.pid)
    store.mark_lost(root, job, store.live_status(root, job, BOOT))
    st = job.record()
    assert st.state == "lost" and st.lost_reason == "the agent is gone (stale heartbeat)" and st.ended_at


def test_the_record_keeps_unknown_keys_and_reads_damage_as_defaults(job: JobDir) -> None:
    job.status_file.write_text('{"state": "running", "newer_writer": {"a": 1}, "heartbeat": "abc", '
                               '"batch_divisor": "x", "cgroup": 5, "attempts": [1, {"n": 1}], "waiting_for_gpus": "y"}')
    rec = job.record()
    assert rec.heartbeat is None and rec.batch_divisor == 1 and rec.cgroup is None and not rec.waiting_for_gpus
    assert rec.attempts == [{"n": 1}]
    rec.attempt = 2
    job.write_record(rec)
    doc = job.record().doc
    assert doc["newer_writer"] == {"a": 1} and doc["attempt"] == 2 and "heartbeat" not in doc
    job.status_file.write_text("[1, 2]")
    assert job.record().doc == {} and job.record().state is None
