"""Ending a set of processes found by a finder, and proving it: what is left after SIGKILL is named."""

import signal
import time
from typing import Callable, List, Optional, Set, Tuple

from remote.core import procs
from remote.stopping import cgroup as cg

Finder = Callable[[], Set[int]]


def end(finder: Finder, grace: float, poll: Optional[Callable[[], None]] = None, cgroup: Optional[str] = None,
        cheap: Optional[Finder] = None, term: bool = True) -> Tuple[List[int], List[int]]:
    """SIGTERM (unless ``term`` is off: they were asked already) what ``finder`` names, wait up to
    ``grace`` s, SIGKILL what is left (and the cgroup); (killed pids, survivors: still alive after
    SIGKILL, looked for again by ``finder``). ``cheap``: a quicker finder for the waits (the
    thorough one reads every process's open files); ``poll``: called while waiting (the supervisor
    reaps its child and beats there)."""
    seen = finder()
    cheap = cheap or finder

    def left() -> Set[int]:
        return {p for p in seen if procs.pid_alive(p)} | cheap()

    if term:
        procs.signal_pids(seen, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and left():
        if poll:
            poll()
        time.sleep(0.2)
    killed = set()  # type: Set[int]
    for _ in range(25):
        now = left()
        if not now:
            break
        killed |= now
        seen |= now
        cg.kill(cgroup)
        procs.signal_pids(now, signal.SIGKILL)
        if poll:
            poll()
        time.sleep(0.1)
    late = finder()  # looked for again the thorough way: what the quick one missed
    if late:
        killed |= late
        procs.signal_pids(late, signal.SIGKILL)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(procs.pid_alive(p) for p in late):
            if poll:
                poll()
            time.sleep(0.1)
    survivors = sorted(p for p in seen | late if procs.pid_alive(p))
    return sorted(killed), survivors
