"""Files that a process holds open for writing (``/proc/<pid>/fd`` and ``fdinfo``).

A checkpoint the job is still writing in place is consistent at any one moment (its size and
stamps stand still between two writes), so a read alone cannot tell it is unfinished: ``pull``
asks this first, waits for the writer to close the file, and leaves out what is still open.
Only processes this user may inspect are seen (the job's own are); elsewhere than Linux, none.
"""

import os
import time
from typing import Dict, Iterable, List

PROC = "/proc"
WRITE_MODES = (os.O_WRONLY, os.O_RDWR)


def _writing(fdinfo: str) -> bool:
    try:
        with open(fdinfo) as f:
            for line in f:
                if line.startswith("flags:"):
                    return (int(line.split()[1], 8) & os.O_ACCMODE) in WRITE_MODES
    except (OSError, ValueError, IndexError):
        pass
    return False


def writers(paths: Iterable[str]) -> Dict[str, List[int]]:
    """``{path: [pid, ...]}`` for each of ``paths`` that some process holds open for writing."""
    real = {}  # type: Dict[str, str]
    for p in paths:
        real[os.path.realpath(p)] = p
    out = {}  # type: Dict[str, List[int]]
    if not real:
        return out
    try:
        pids = [d for d in os.listdir(PROC) if d.isdigit()]
    except OSError:
        return out
    me = str(os.getpid())
    for pid in pids:
        if pid == me:
            continue
        fd_dir = "{}/{}/fd".format(PROC, pid)
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd_dir + "/" + fd)
            except OSError:
                continue
            name = real.get(target)
            if name is not None and _writing("{}/{}/fdinfo/{}".format(PROC, pid, fd)):
                held = out.setdefault(name, [])
                if int(pid) not in held:
                    held.append(int(pid))
    return out


def wait_closed(paths: Iterable[str], timeout: float, poll: float = 0.2) -> Dict[str, List[int]]:
    """Wait up to ``timeout`` seconds for every writer of ``paths`` to close them; returns the
    ones still held open then (empty: all closed)."""
    deadline = time.monotonic() + max(0.0, timeout)
    held = writers(paths)
    while held and time.monotonic() < deadline:
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))
        held = writers(list(held))
    return held
