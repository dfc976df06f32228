"""File-system steps of a receiver: making writes durable (fsync, ``syncfs``), renaming into
place over a folder, removing a file or a folder."""

import os
import shutil
from pathlib import Path
from typing import List, Optional

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def replace(tmp: str, target: str) -> None:
    try:
        os.replace(tmp, target)
    except OSError:
        if not (os.path.isdir(target) and not os.path.islink(target)):
            raise
        shutil.rmtree(target)  # a folder replaced by a file
        os.replace(tmp, target)


def remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def durable(path: Path, files: Optional[List[str]] = None) -> None:
    """Make ``files`` (with their folders) durable, or with none given the whole file system
    holding ``path`` (``syncfs``; ``sync`` where it is missing)."""
    if files is not None:
        for p in files + sorted(set(os.path.dirname(f) for f in files)):
            try:
                fd = os.open(p, os.O_RDONLY | CLOEXEC)
            except OSError:
                continue
            try:
                os.fsync(fd)
            except OSError:
                pass
            finally:
                os.close(fd)
        return
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).syncfs
        fd = os.open(str(path), os.O_RDONLY | CLOEXEC)
        try:
            if fn(fd) == 0:
                return
        finally:
            os.close(fd)
    except (ImportError, OSError, AttributeError):
        pass
    if hasattr(os, "sync"):
        os.sync()
