"""Where gpujob keeps its own files on the laptop: the config, state and cache folders (mode 0700).

A foundation module (no layer below it), so that ``bundle`` can keep its version cache;
``gpujob.config.paths`` re-exports these for the rest of gpujob."""

from __future__ import annotations

import os
from pathlib import Path


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
