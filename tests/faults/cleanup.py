"""No job process outlives its test: every process whose environment carries a
``GPUJOB_JOB_DIR`` under a given folder is killed (supervisors carry their job folder on their
command line: they are found by it)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from remote.procs import _parents, pid_alive


def job_processes_under(folder: Path) -> set[int]:
    """Processes of jobs whose folder lies under ``folder`` (trainers by environment, supervisors
    and agents by command line)."""
    token = f"GPUJOB_JOB_DIR={os.path.realpath(folder)}".encode()
    token2 = f"GPUJOB_JOB_DIR={folder}".encode()
    roots = {os.path.realpath(folder).encode(), str(folder).encode()}
    me = os.getpid()
    found = set()
    for pid in _parents():
        if pid == me:
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if token in env or token2 in env or (b"remote\0" in cmd and any(r in cmd for r in roots)):
            found.add(pid)
    return found


def kill_job_processes(folder: Path) -> list[int]:
    """SIGKILL every job process under ``folder``; returns the pids killed."""
    pids = job_processes_under(folder)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return sorted(p for p in pids if not pid_alive(p) or True)
