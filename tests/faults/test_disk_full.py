"""A job fills the instance's disk (the root on a small tmpfs): its final state is still
recorded, the read-only verbs keep working, no temporary file is left, and status says how
much is free and what to delete.

The instance's disk fills up while a submit's code arrives (the project's code folder on a
small tmpfs of its own): the submit says the disk is full and how to free it (it used to say
"agent error in sync: [Errno 28] ..., run submit again", which cannot help), and once there is
room the next submit runs exactly the code sent."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import kill_job_processes, run_cli
from tests.helpers import remote_root, wait_state, write_job

FILLER = """
import os, pathlib, sys
ck = pathlib.Path(os.environ["GPUJOB_CKPT_DIR"])
step = 0
try:
    while True:
        step += 1
        d = ck / f"step-{step}"
        d.mkdir()
        with open(d / "w.bin", "wb") as f:
            for _ in range(16):
                f.write(bytes(1 << 20))
        (d / ".gpujob-complete").write_text("")
        print("saved step", step, flush=True)
except OSError as e:
    print("the disk is full:", e, flush=True)
with open(ck / "last-page", "wb", buffering=0) as f:  # not one free page left for the agent
    for size in (4096, 1):
        try:
            while True:
                f.write(bytes(size))
        except OSError:
            pass
sys.exit(1)
"""


@contextlib.contextmanager
def tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` on ``mnt`` (made), unmounted afterwards (skips where mounting is not allowed)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root and mount(8) for a tmpfs")
    mnt.mkdir(parents=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        kill_job_processes(mnt)
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 300 MB tmpfs (a submit wants 256 MB free)."""
    with tmpfs(tmp_path / f"gjdisk-{uuid.uuid4().hex[:6]}", "300m") as mnt:
        yield mnt


def test_a_full_disk_keeps_the_record_and_the_read_only_verbs(small_disk: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUJOB_LOCAL_ROOT", str(small_disk / "root"))
    job = write_job(tmp_path, "filler", FILLER, "python main.py", checkpoint={"keep": 100})
    with open(job.parent / "big.bin", "wb") as f:
        f.truncate(100 << 20)  # sparse here, 100 MB there: more than the 300 MB disk can take with its margin
    r = run_cli("submit", str(job))
    assert r.returncode != 0 and "not enough space" in r.stderr, r.stderr
    (job.parent / "big.bin").unlink()
    # the refused submit gave its project's sync lease back: this one does not wait 60 s for it
    r = run_cli("submit", str(job), "--json", timeout=40)
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    st = wait_state("local", job_id, ("failed", "succeeded"), 120)
    assert st["state"] == "failed" and st["exit_code"] == 1
    jd = small_disk / "root" / "jobs" / job_id
    assert json.loads((jd / "status.json").read_text())["state"] == "failed"  # recorded, not only concluded
    assert not list(small_disk.rglob("*.tmp")), list(small_disk.rglob("*.tmp"))
    # the reserve gave its room back for the final state: fill that too, then every read-only verb answers
    with open(small_disk / "rest", "wb") as f, pytest.raises(OSError):
        while True:
            f.write(bytes(1 << 16))
            f.flush()
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    assert free < 1 << 16
    r = run_cli("status", job_id)
    assert r.returncode == 0, r.stderr
    assert "MB free" in r.stderr and "step-" in r.stderr and "delete" in r.stderr
    r = run_cli("status", job_id, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["disk"]["free_bytes"] == free
    r = run_cli("ls")
    assert r.returncode == 0 and "MB free" in r.stderr, r.stderr
    r = run_cli("ls", "--json")
    assert r.returncode == 0 and job_id in r.stdout, r.stderr
    r = run_cli("tail", job_id, "-n", "3")
    assert r.returncode == 0 and "the disk is full" in r.stdout, r.stderr
    r = run_cli("pull", job_id, str(tmp_path / "p"), "--latest", "--json")
    assert r.returncode == 0, r.stderr
    assert not list(small_disk.rglob("*.tmp"))


SLEEPER = """
import time
print("ready", flush=True)
while True:
    time.sleep(0.2)
"""


def test_stop_on_a_full_disk_stops_the_job(small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``stop`` writes its stop file with the reserve's room: a full disk does not keep a job running."""
    monkeypatch.setenv("GPUJOB_LOCAL_ROOT", str(small_disk / "root"))
    job = write_job(tmp_path, "sleeper", SLEEPER, "python main.py")
    r = run_cli("submit", str(job), "--json")
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    wait_state("local", job_id, ("running",), 60)
    assert (small_disk / "root" / ".reserve").exists()
    fill(small_disk / "rest")
    r = run_cli("stop", job_id, "--json")
    assert r.returncode == 0, r.stderr
    st = wait_state("local", job_id, ("stopped", "failed", "succeeded"), 60)
    assert st["state"] == "stopped", st
    jd = small_disk / "root" / "jobs" / job_id
    assert json.loads((jd / "status.json").read_text())["state"] == "stopped"
    assert not list(small_disk.rglob("*.tmp"))


def fill(path: Path) -> None:
    """Take every free byte of the disk holding ``path``: big writes, then pages, then bytes."""
    with open(path, "wb", buffering=0) as f:
        for size in (1 << 16, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(bytes(size))
    assert os.statvfs(path.parent).f_bavail == 0


@pytest.fixture
def small_code_disk(tmp_path: Path) -> Iterator[Path]:
    """``<root>/projects/full/code`` on a 12 MB tmpfs."""
    with tmpfs(remote_root(tmp_path, "local") / "projects" / "full" / "code", "12m") as code:
        yield code


def test_a_disk_that_fills_during_sync_is_named_and_the_next_submit_is_whole(small_code_disk: Path,
                                                                               tmp_path: Path) -> None:
    job = write_job(tmp_path, "full", "print(open('data.bin', 'rb').read()[:4].hex(), flush=True)", "python main.py")
    data = os.urandom(16 << 20)
    (job.parent / "data.bin").write_bytes(data)
    r = run_cli("submit", str(job), "--host", "local")
    assert r.returncode != 0
    assert "is full" in r.stderr and "free space" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "agent error" not in r.stderr, r.stderr
    jobs = remote_root(tmp_path, "local") / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir())  # no job of code that did not all arrive
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_code_disk)], check=True)
    r = run_cli("submit", str(job), "--host", "local", "--json")
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    wait_state("local", job_id, ("succeeded",), 60, remote_root(tmp_path, "local"))
    jd = remote_root(tmp_path, "local") / "jobs" / job_id
    assert (jd / "code" / "data.bin").read_bytes() == data
    assert data[:4].hex() in (jd / "output.log").read_text()
    assert not [p.name for p in small_code_disk.iterdir() if p.name.startswith(".gpujob-")]
