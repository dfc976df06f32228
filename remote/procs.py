"""Processes: liveness that guards against pid reuse, and stopping a whole job's tree.

A job's processes are found two ways, so none escapes: by parent links from the run
command's pid, and by the ``GPUJOB_JOB_ID`` in their environment (torchrun workers and
anything that calls ``setsid`` leave the process group, but keep the environment).
"""

import os
import signal
import time
from pathlib import Path
from typing import Dict, List, Optional, Set

PROC = Path("/proc")


def boot_id() -> str:
    """This boot's identity; ``GPUJOB_BOOT_ID_FILE`` names another file to read it from."""
    path = os.environ.get("GPUJOB_BOOT_ID_FILE") or "/proc/sys/kernel/random/boot_id"
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def pid_alive(pid: Optional[int]) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        stat = (PROC / str(pid) / "stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _environ(pid: int) -> bytes:
    try:
        return (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return b""


def _cmdline(pid: int) -> bytes:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return b""


def belongs_to(pid: Optional[int], job_id: str) -> bool:
    """True if ``pid`` is alive and is this job's (job id in its environment or command line)."""
    if not pid_alive(pid):
        return False
    token = job_id.encode()
    return (b"GPUJOB_JOB_ID=" + token + b"\0") in _environ(pid) or token in _cmdline(pid)


def _parents() -> Dict[int, int]:
    out = {}
    for d in PROC.iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                out[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return out


def job_pids(job_id: str, root_pid: Optional[int] = None, job_dir: Optional[str] = None) -> Set[int]:
    """Every live process of the job: descendants of ``root_pid`` and carriers of its job id
    (of its job folder, when ``job_dir`` is given: the nodes of a several-node job share the
    id, and two of them can share one machine's process table)."""
    me = os.getpid()
    parents = _parents()
    found = set()
    token = (b"GPUJOB_JOB_DIR=" + job_dir.encode() if job_dir else b"GPUJOB_JOB_ID=" + job_id.encode()) + b"\0"
    for pid in parents:
        if pid != me and token in _environ(pid):
            found.add(pid)
    if root_pid:
        frontier = [root_pid] if root_pid in parents else []
        while frontier:
            p = frontier.pop()
            if p != me:
                found.add(p)
            frontier.extend(c for c, pp in parents.items() if pp == p and c not in found)
    return {p for p in found if pid_alive(p)}


def signal_pids(pids: Set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(job_id: str, root_pid: Optional[int], grace: float, poll=None, job_dir: Optional[str] = None) -> List[int]:
    """SIGTERM every process of the job, wait up to ``grace`` s, then SIGKILL what is left.

    ``poll`` is called while waiting (the supervisor reaps its child there). Returns the
    pids that had to be killed.
    """
    pids = job_pids(job_id, root_pid, job_dir)
    signal_pids(pids, signal.SIGTERM)
    deadline = time.time() + grace
    while time.time() < deadline:
        if poll:
            poll()
        if not job_pids(job_id, root_pid, job_dir):
            return []
        time.sleep(0.2)
    killed = []
    for _ in range(20):
        left = job_pids(job_id, root_pid, job_dir)
        if not left:
            break
        killed.extend(left)
        signal_pids(left, signal.SIGKILL)
        if poll:
            poll()
        time.sleep(0.1)
    return sorted(set(killed))
