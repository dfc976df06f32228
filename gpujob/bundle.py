"""Where the instance-side code lives in a checkout or an installed wheel, and how it is packed.

In a checkout ``remote/`` and ``templates/`` sit next to the ``gpujob`` package; the wheel
carries them as ``gpujob/_remote`` and ``gpujob/_templates``.
"""

from __future__ import annotations

import importlib.util
import sys
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


def _remote_package() -> None:
    """Make ``remote`` name the agent package gpujob ships: its modules import each other as
    ``remote.x``, as they run on the instance. In a checkout that is the folder beside the
    package; from a wheel, ``gpujob/_remote``, which nothing else puts on ``sys.path``."""
    here = remote_dir()
    mod = sys.modules.get("remote")
    if mod is not None:
        if any(Path(p).resolve() == here for p in getattr(mod, "__path__", [])):
            return
        raise ImportError(f"another module named 'remote' is loaded ({getattr(mod, '__file__', mod)}); "
                          "gpujob's agent code needs that name")
    spec = importlib.util.spec_from_file_location("remote", here / "__init__.py", submodule_search_locations=[str(here)])
    assert spec and spec.loader
    pkg = importlib.util.module_from_spec(spec)
    sys.modules["remote"] = pkg
    spec.loader.exec_module(pkg)


def import_remote(name: str) -> ModuleType:
    """The agent's module (or package) ``remote/<name>``, for laptop code that shares pure helpers
    with the agent: one copy per process, the same one tests and the agent's own imports see."""
    _remote_package()
    return importlib.import_module(f"remote.{name}")


def bundle_files() -> dict[str, Path]:
    """Archive name -> source file for everything uploaded to ``<root>/agent/<version>/``."""
    files: dict[str, Path] = {}
    rdir = remote_dir()
    for p in sorted(rdir.rglob("*.py")):
        files["remote/" + p.relative_to(rdir).as_posix()] = p
    runtime = templates_dir() / "runtime" / "gpujob_runtime.py"
    if runtime.is_file():
        files["runtime/gpujob_runtime.py"] = runtime
    # the agent's checkpoint package (relative imports only), under a name no user module takes
    for p in sorted((rdir / "ckpt" / "checkpoints").glob("*.py")):
        files["runtime/gpujob_checkpoints/" + p.name] = p
    for p in sorted((templates_dir() / "runtime" / "autohook").glob("*.py")):  # the Trainer stop hook
        files["runtime/autohook/" + p.name] = p
    return files


@lru_cache(maxsize=1)
def bundle_version() -> str:
    """Package version plus a hash of the bundle's content: a changed agent is a new upload."""
    import hashlib  # only a command that talks to an agent: the defaults in remote/core/spec.py load without it

    from gpujob.version import __version__

    h = hashlib.sha256()
    for name, path in bundle_files().items():
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{__version__}-{h.hexdigest()[:10]}"


def bundle_tar() -> bytes:
    """The bundle as an uncompressed tar (a few dozen KB)."""
    import io
    import tarfile  # only an agent's install packs it: status and ls, which import this module, never do

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
