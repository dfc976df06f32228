"""The one place ``flock`` is called, on the instance and (through ``gpujob.bundle.import_remote``) on
the laptop: an advisory lock on an open descriptor, shared or exclusive, waiting for it or not, and
whether another process holds one. Closing the last descriptor of the open file lets its lock go.

What each lock guards is said where it is taken (remote/core/locks.py holds the job's and the
project's); this module only takes them, so which ones wait and which give up is read at each call.
"""

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator, Union

PathLike = Union[str, Path]


def lock(fd: int, shared: bool = False, blocking: bool = True) -> bool:
    """Lock the open file ``fd`` (exclusive unless ``shared``); False when ``blocking`` is off and
    another process holds a lock that conflicts. A blocking call waits and returns True."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def unlock(fd: int) -> None:
    """Let go of the lock on ``fd`` while keeping it open."""
    fcntl.flock(fd, fcntl.LOCK_UN)


def held(path: PathLike) -> bool:
    """Whether another process holds ``path`` locked exclusively now: False when the file does not
    exist. Opened read-only (a full disk answers too); another error opening it is raised."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        return not lock(fd, shared=True, blocking=False)
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(path: PathLike, shared: bool = False, blocking: bool = True, mode: int = 0o644) -> Iterator[bool]:
    """Hold a lock on ``path`` (created if missing, with ``mode``) for the ``with`` block; yields
    False when ``blocking`` is off and another process holds it (then nothing is held)."""
    fd = os.open(str(path), os.O_RDWR | os.O_CREAT, mode)
    try:
        yield lock(fd, shared, blocking)
    finally:
        os.close(fd)
