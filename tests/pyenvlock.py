"""This image's login shells run `pyenv init`, whose `pyenv rehash` holds a lock file while it links
the shims. A login shell killed with SIGKILL (or frozen) meanwhile leaves the lock behind (SIGTERM
runs its exit trap), and every later login shell of the machine then waits on it for
``PYENV_REHASH_TIMEOUT`` (60 s unless set): a fault test that kills a job as it starts would stall
every other test's `bash -lc` for the rest of the run. The suite drops such a leftover as soon as
it is one: the lock exists, is older than a rehash takes, and no `pyenv rehash` runs."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

LOCK = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))) / "shims" / ".pyenv-shim"
SETTLE_S = 2.0  # a live rehash can hold it this long on a loaded machine without being a leftover
EVERY_S = 0.5


def _rehash_running() -> bool:
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and b"pyenv-rehash" in Path(f"/proc/{d}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def drop_stale_lock(settle_s: float = SETTLE_S) -> bool:
    """Remove the lock if it is a leftover; True if it was. A live rehash owns it (its process is
    seen), and while a lock exists no new rehash can take one, so the same file seen before and after
    the process scan is the leftover."""
    try:
        before = LOCK.stat()
    except OSError:
        return False
    if time.time() - before.st_mtime < settle_s or _rehash_running():
        return False
    try:
        after = LOCK.stat()
        if (after.st_ino, after.st_mtime_ns) != (before.st_ino, before.st_mtime_ns):
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
