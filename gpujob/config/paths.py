"""Where gpujob keeps its own files on the laptop."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType


def config_dir() -> Path:
    """``$GPUJOB_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/gpujob``, else ``~/.config/gpujob`` (mode 0700)."""
    env = os.environ.get("GPUJOB_CONFIG_DIR")
    return _private(Path(env) if env else Path(os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")) / "gpujob")


def _private(d: Path) -> Path:
    """``d``, made if missing, mode 0700 (changed only when it is not: a chmod writes the inode,
    and every command asks for these folders)."""
    d.mkdir(parents=True, exist_ok=True)
    try:
        if d.stat().st_mode & 0o777 != 0o700:
            d.chmod(0o700)
    except OSError:
        pass
    return d


def _own_dir(override: str, xdg: str, default: str, beside_config: str) -> Path:
    env = os.environ.get(override)
    if env:
        return _private(Path(env))
    if os.environ.get("GPUJOB_CONFIG_DIR") and not os.environ.get(xdg):
        return _private(Path(os.environ["GPUJOB_CONFIG_DIR"]) / beside_config)  # an isolated config keeps all together
    return _private(Path(os.environ.get(xdg) or str(Path.home() / default)) / "gpujob")


def state_dir() -> Path:
    """``$GPUJOB_STATE_DIR``, else ``$XDG_STATE_HOME/gpujob``, else ``~/.local/state/gpujob``: the job index."""
    return _own_dir("GPUJOB_STATE_DIR", "XDG_STATE_HOME", ".local/state", "state")


def cache_dir() -> Path:
    """``$GPUJOB_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpujob``, else ``~/.cache/gpujob``: hash caches."""
    return _own_dir("GPUJOB_CACHE_DIR", "XDG_CACHE_HOME", ".cache", "cache")


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
