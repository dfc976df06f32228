"""Processes: liveness that guards against pid reuse, and stopping a whole job's tree.

``end`` is the one SIGTERM → wait → SIGKILL loop of gpujob (the agent's stops, a tool's process
group, the laptop's helper commands through ``import_remote``): each caller says how its targets
are signalled (pids found again each time, a process group, a cgroup) and how it knows they are gone.

A job's processes are found two ways, so none escapes: by parent links from the run
command's pid, and by a variable in their environment (torchrun workers and anything that
calls ``setsid`` leave the process group, but keep the environment): ``GPUJOB_JOB_DIR``
when the job's folder is known (the nodes of a several-node job share an id, and two can
share one machine), else ``GPUJOB_JOB_ID``.
"""

import os
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set

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
    if pid is None or not pid_alive(pid):
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


def signal_group(pgid: int, sig: int) -> bool:
    """Signal the process group ``pgid``; False when it is gone (no process of it is left)."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member runs as another user: the group is there
        pass
    return True


def group_alive(pgid: int) -> bool:
    return signal_group(pgid, 0)


Poll = Optional[Callable[[], object]]


def wait_gone(alive: Callable[[], bool], timeout: float, poll: Poll = None, tick: float = 0.2) -> bool:
    """Wait up to ``timeout`` s for ``alive()`` to turn False, calling ``poll`` between looks (a
    caller reaps its child there); whether it did."""
    deadline = time.monotonic() + timeout
    while alive():
        if time.monotonic() >= deadline:
            return False
        if poll:
            poll()
        time.sleep(tick)
    return True


def end(send: Callable[[int], bool], alive: Callable[[], bool], grace: float, kill_wait: float, poll: Poll = None,
        term: bool = True, tick: float = 0.2, kill_tick: float = 0.1, kill_again: bool = False) -> bool:
    """SIGTERM, up to ``grace`` s, SIGKILL, up to ``kill_wait`` s: whether the targets are gone.

    ``send(sig)`` signals the targets (False: none is left to signal, nothing more to do);
    ``alive()`` says whether any is left; ``poll`` runs between looks. ``term`` off: they were asked
    to stop already (the stop signal of each, remote/run/stopper.py): the wait and SIGKILL only.
    ``kill_again``: SIGKILL at every look, not once (pids found anew each time: a fork since).
    """
    import signal  # here and in stop_signal: every verb's start imports this module, few of them signal

    if term and not send(signal.SIGTERM):
        return True
    if wait_gone(alive, grace, poll, tick):
        return True
    deadline, sent = time.monotonic() + kill_wait, False
    while alive():
        if kill_again or not sent:
            if not send(signal.SIGKILL):
                return True
            sent = True
        if poll:
            poll()
        if time.monotonic() >= deadline:
            return False
        time.sleep(kill_tick)
    return True


def kill_tree(job_id: str, root_pid: Optional[int], grace: float, poll: Poll = None,
              job_dir: Optional[str] = None) -> List[int]:
    """SIGTERM every process of the job, wait up to ``grace`` s, then SIGKILL what is left (found
    again at each look). ``poll`` is called while waiting. Returns the pids that had to be killed."""
    import signal

    left: Set[int] = set()
    killed: Set[int] = set()

    def alive() -> bool:
        left.clear()
        left.update(job_pids(job_id, root_pid, job_dir))
        return bool(left)

    def send(sig: int) -> bool:
        pids = job_pids(job_id, root_pid, job_dir) if sig == signal.SIGTERM else left
        if sig == signal.SIGKILL:
            killed.update(pids)
        signal_pids(pids, sig)
        return True

    end(send, alive, grace, 2.0, poll, kill_again=True)
    return sorted(killed)


# --- asking a job that does not watch the stop file to stop -------------------------------

SHELLS = ("bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "busybox")
FORWARDERS = (b"torch.distributed.run", b"torch.distributed.launch", b"torchrun")  # pass signals to workers


def _status_mask(pid: int, field: str) -> int:
    """A signal mask of /proc/PID/status (``SigCgt``: caught, ``SigIgn``: ignored), 0 if unreadable."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _comm(pid: int) -> str:
    try:
        return (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def _forwards(cmd: bytes) -> bool:
    """torchrun (``torchrun ...``, ``python -m torch.distributed.run ...``, the console script)."""
    args = cmd.split(b"\0")[:3]
    return any(os.path.basename(a) in FORWARDERS for a in args)


def _catches(mask: int, sig: int) -> bool:
    return bool(mask >> (sig - 1) & 1)


def stop_signal(pid: int) -> int:
    """The signal by which ``pid`` is most likely to stop cleanly.

    SIGTERM when it installed its own SIGTERM handler (it asked for it: Lightning, HF's
    ``enable_jit_checkpoint``, a script's handler); else SIGINT when it catches SIGINT: every
    Python program does by default, raising KeyboardInterrupt where the loop is, so ``finally``
    blocks and ``except KeyboardInterrupt:`` savers run (SIGTERM would end it on the spot).
    torchrun gets SIGINT too: it forwards its signal to the workers. Anything else: SIGTERM.
    """
    import signal

    if _forwards(_cmdline(pid)):
        return signal.SIGINT
    caught = _status_mask(pid, "SigCgt")
    if _catches(caught, signal.SIGTERM):
        return signal.SIGTERM
    if _catches(caught, signal.SIGINT):
        return signal.SIGINT
    return signal.SIGTERM


def stop_targets(pids: Set[int]) -> Dict[int, int]:
    """Which of a job's processes to ask to stop, and with which signal.

    Shells are skipped (each ends when its command does, and runs no further command of the
    job's script after it was stopped); so are forks that share their parent's command line
    (DataLoader workers: their parent shuts them down) and torchrun's workers (torchrun
    forwards the signal). A process would otherwise get the signal twice, and a second
    KeyboardInterrupt can break the first one's save.
    """
    parents = _parents()
    out = {}
    for pid in pids:
        if _comm(pid) in SHELLS:
            continue
        parent = parents.get(pid)
        if parent in pids:
            pcmd = _cmdline(parent)
            if pcmd == _cmdline(pid) or _forwards(pcmd):
                continue
        out[pid] = stop_signal(pid)
    return out


def ask_to_stop(job_id: str, root_pid: Optional[int], job_dir: Optional[str] = None,
                pids: Optional[Set[int]] = None) -> Dict[int, int]:
    """Send each of the job's processes chosen by :func:`stop_targets` its stop signal (``pids``:
    the job's processes when the caller found them more thoroughly, remote/stopping/find.py)."""
    targets = stop_targets(job_pids(job_id, root_pid, job_dir) if pids is None else pids)
    for pid, sig in targets.items():
        signal_pids({pid}, sig)
    return targets
