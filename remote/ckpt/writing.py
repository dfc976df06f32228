"""Files that a process holds open for writing (``/proc/<pid>/fd`` and ``fdinfo``).

A checkpoint the job is still writing in place is consistent at any one moment (its size and
stamps stand still between two writes), so a read alone cannot tell it is unfinished: ``pull``
asks this first, waits for the writer to close the file, and leaves out what is still open.
Only processes this user may inspect are seen (the job's own are); elsewhere than Linux, none.
"""

import os
import time
from typing import Dict, Iterable, List

from remote.ckpt.checkpoints import write_fds


def writers(paths: Iterable[str]) -> Dict[str, List[int]]:
    """``{path: [pid, ...]}`` for each of ``paths`` that some process holds open for writing."""
    real = {}  # type: Dict[str, str]
    for p in paths:
        real[os.path.realpath(p)] = p
    out = {}  # type: Dict[str, List[int]]
    if not real:
        return out
    me = os.getpid()
    for pid, target in write_fds(None, real.__contains__):
        held = out.setdefault(real[target], [])
        if pid != me and pid not in held:
            held.append(pid)
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
