"""Where gpujob keeps its own files on the laptop."""

from __future__ import annotations

import os
from pathlib import Path


def config_dir() -> Path:
    """``$GPUJOB_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/gpujob``, else ``~/.config/gpujob`` (mode 0700)."""
    env = os.environ.get("GPUJOB_CONFIG_DIR")
    if env:
        d = Path(env)
    else:
        base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        d = Path(base) / "gpujob"
    d.mkdir(parents=True, exist_ok=True)
    try:
        d.chmod(0o700)
    except OSError:
        pass
    return d


def write_private(path: Path, data: str | bytes) -> None:
    """Write a file readable by its owner only, atomically (tmp + rename)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
