"""The supervisor as a child subreaper (prctl PR_SET_CHILD_SUBREAPER): a process of the job
whose parent exits (a double-forked daemon) becomes the supervisor's child instead of init's,
so it stays findable as the job's. The supervisor then reaps those orphans itself."""

import ctypes
import os
from typing import Set

PR_SET_CHILD_SUBREAPER = 36


def become() -> bool:
    """Make this process a subreaper; False where the host refuses (not Linux, no libc)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap(children: Set[int]) -> None:
    """Collect exited orphans among ``children`` (never the run command: Popen waits for it,
    and never a helper of our own: subprocess waits for those)."""
    for pid in children:
        try:
            os.waitpid(pid, os.WNOHANG)
        except OSError:
            pass
