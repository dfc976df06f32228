"""Where gpujob keeps its own files on the laptop."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from gpujob.userdirs import cache_dir, config_dir, state_dir  # noqa: F401  (re-exported)


def moved_from_config(new: Path) -> Path:
    """``new``; a file of that name that older versions kept in the config folder is moved there once.

    Same file system: one rename. Otherwise a copy under a temporary name, fsynced, renamed into
    place, and only then the old file removed, so a crash midway leaves one whole copy. When both
    exist the new one wins and the old one stays (nothing is lost).
    """
    old = config_dir() / new.name
    if new.exists() or not old.exists() or old.resolve() == new.resolve():
        return new
    try:
        os.rename(old, new)
        return new
    except FileNotFoundError:  # another gpujob moved it meanwhile
        return new
    except OSError:
        pass
    tmp = new.with_name(f".{new.name}.{os.getpid()}.moving")
    import shutil

    shutil.copy2(old, tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, new)
    old.unlink(missing_ok=True)
    return new


def write_private(path: Path, data: str | bytes) -> None:
    """Write a file readable by its owner only, atomically (``remote/core/atomicfile.py``: a temporary
    name of this writer's own, fsync, rename, the folder fsynced)."""
    atomicfile().write(path, data, 0o600)


def atomicfile() -> ModuleType:
    """The one way gpujob rewrites a shared file (``remote/core/atomicfile.py``, shared with the agent):
    ``write``, ``update`` (read-modify-write under the file's lock), ``append``, ``locked``."""
    from gpujob.bundle import import_remote

    return import_remote("core.atomicfile")
