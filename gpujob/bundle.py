"""Where the instance-side code lives in a checkout or an installed wheel, and how it is packed.

In a checkout ``remote/`` and ``templates/`` sit next to the ``gpujob`` package; the wheel
carries them as ``gpujob/_remote`` and ``gpujob/_templates``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import sys
import tarfile
from functools import lru_cache
from pathlib import Path
from types import ModuleType

_PKG = Path(__file__).resolve().parent


def _find(checkout_name: str, wheel_name: str) -> Path:
    for cand in (_PKG.parent / checkout_name, _PKG / wheel_name):
        if cand.is_dir():
            return cand
    raise FileNotFoundError(f"gpujob is installed without its {checkout_name}/ folder ({_PKG})")


def remote_dir() -> Path:
    """The folder holding the agent package (``remote/``)."""
    return _find("remote", "_remote")


def templates_dir() -> Path:
    """The folder holding the training templates and the runtime helper."""
    return _find("templates", "_templates")


def import_remote(name: str) -> ModuleType:
    """Import ``remote/<name>.py`` (or the package ``remote/<name>/``, whose modules import each
    other relatively) by path, so laptop code can share pure helpers with the agent."""
    key = f"gpujob_remote_{name}"
    if key in sys.modules:
        return sys.modules[key]
    pkg = remote_dir() / name
    if (pkg / "__init__.py").is_file():
        spec = importlib.util.spec_from_file_location(key, pkg / "__init__.py", submodule_search_locations=[str(pkg)])
    else:
        spec = importlib.util.spec_from_file_location(key, remote_dir() / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[key] = mod
    spec.loader.exec_module(mod)
    return mod


def bundle_files() -> dict[str, Path]:
    """Archive name -> source file for everything uploaded to ``<root>/agent/<version>/``."""
    files: dict[str, Path] = {}
    rdir = remote_dir()
    for p in sorted(rdir.rglob("*.py")):
        files["remote/" + p.relative_to(rdir).as_posix()] = p
    runtime = templates_dir() / "runtime" / "gpujob_runtime.py"
    if runtime.is_file():
        files["runtime/gpujob_runtime.py"] = runtime
    files["runtime/gpujob_checkpoints.py"] = rdir / "checkpoints.py"
    for p in sorted((templates_dir() / "runtime" / "autohook").glob("*.py")):  # the Trainer stop hook
        files["runtime/autohook/" + p.name] = p
    return files


@lru_cache(maxsize=1)
def bundle_version() -> str:
    """Package version plus a hash of the bundle's content: a changed agent is a new upload."""
    from gpujob import __version__

    h = hashlib.sha256()
    for name, path in bundle_files().items():
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{__version__}-{h.hexdigest()[:10]}"


def bundle_tar() -> bytes:
    """The bundle as an uncompressed tar (a few dozen KB)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, path in bundle_files().items():
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def materialize_runtime(dest: Path) -> Path:
    """Write the runtime folder (what the agent puts on the job's PYTHONPATH) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, path in bundle_files().items():
        if name.startswith("runtime/"):
            target = dest / name.split("/", 1)[1]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    return dest
