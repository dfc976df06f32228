"""This image's login shells run `pyenv init`, whose `pyenv rehash` holds a lock file while it links
the shims. A login shell killed with SIGKILL (or frozen) meanwhile leaves the lock behind (SIGTERM
runs its exit trap), and every later login shell of the machine then waits on it for
``PYENV_REHASH_TIMEOUT`` (60 s unless set): a fault test that kills a job as it starts would stall
every other test's `bash -lc` for the rest of the run. The suite drops such a leftover once it is
older than any rehash takes. Its age is the only sign: the shells waiting on a leftover are
`pyenv rehash` processes too, so a running one says nothing about who holds it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

LOCK = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))) / "shims" / ".pyenv-shim"
STALE_S = 10.0  # a rehash holds it for well under a second, a few on a loaded machine
EVERY_S = 0.5


def drop_stale_lock() -> bool:
    """Remove the lock if it is a leftover; True if it was. The holder rewrites it (the prototype
    shim) as soon as it has it, so an old file is one nobody holds; the same file is checked again
    just before it goes."""
    try:
        seen = LOCK.stat()
    except OSError:
        return False
    if time.time() - seen.st_mtime < STALE_S:
        return False
    try:
        now = LOCK.stat()
        if (now.st_ino, now.st_mtime_ns) != (seen.st_ino, seen.st_mtime_ns):
            return False
        LOCK.unlink()
    except OSError:
        return False
    return True


def sweep_in_background() -> None:
    """Check every ``EVERY_S`` for the rest of the run (a daemon thread of the process that calls it)."""
    if not LOCK.parent.is_dir():
        return  # no pyenv here

    def loop() -> None:
        while True:
            drop_stale_lock()
            time.sleep(EVERY_S)

    threading.Thread(target=loop, name="pyenv-lock-sweeper", daemon=True).start()
