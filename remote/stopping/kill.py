"""Ending a set of processes found by a finder, and proving it: what is left after SIGKILL is named."""

import signal
from typing import Callable, List, Optional, Set, Tuple

from remote.core import procs
from remote.stopping import cgroup as cg

Finder = Callable[[], Set[int]]
KILL_WAIT = 2.5  # s of SIGKILL, sent again at each look, before the thorough finder looks once more


def end(finder: Finder, grace: float, poll: Optional[Callable[[], None]] = None, cgroup: Optional[str] = None,
        cheap: Optional[Finder] = None, term: bool = True) -> Tuple[List[int], List[int]]:
    """SIGTERM (unless ``term`` is off: they were asked already) what ``finder`` names, wait up to
    ``grace`` s, SIGKILL what is left (and the cgroup); (killed pids, survivors: still alive after
    SIGKILL, looked for again by ``finder``). ``cheap``: a quicker finder for the waits (the
    thorough one reads every process's open files); ``poll``: called while waiting (the supervisor
    reaps its child and beats there)."""
    seen = finder()
    find = cheap or finder
    now: Set[int] = set()
    killed: Set[int] = set()

    def left() -> bool:
        now.clear()
        now.update({p for p in seen if procs.pid_alive(p)} | find())
        return bool(now)

    def send(sig: int) -> bool:
        if sig == signal.SIGKILL:  # what is left now: the cgroup too, and what was found since
            killed.update(now)
            seen.update(now)
            cg.kill(cgroup)
            procs.signal_pids(now, sig)
        else:
            procs.signal_pids(seen, sig)
        return True

    procs.end(send, left, grace, KILL_WAIT, poll, term=term, kill_again=True)
    late = finder()  # looked for again the thorough way: what the quick one missed
    if late:
        killed |= late
        procs.signal_pids(late, signal.SIGKILL)
        procs.wait_gone(lambda: any(procs.pid_alive(p) for p in late), 2.0, poll, 0.1)
    survivors = sorted(p for p in seen | late if procs.pid_alive(p))
    return sorted(killed), survivors
