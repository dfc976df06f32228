"""Where the instance-side code lives in a checkout or an installed wheel, and how it is packed.

In a checkout ``remote/`` and ``templates/`` sit next to the ``gpujob`` package; the wheel
carries them as ``gpujob/_remote`` and ``gpujob/_templates``.
"""

from __future__ import annotations

import importlib.util
import os
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


def _bundle_paths() -> list[tuple[str, str]]:
    """(archive name, source file) for everything uploaded to ``<root>/agent/<version>/``, in the
    archive's order; strings and os.walk, not pathlib (a fifth of the cost: every agent command asks)."""
    rdir, tdir = str(remote_dir()), str(templates_dir())
    found = []
    for d, dirs, names in os.walk(rdir):
        dirs[:] = [x for x in dirs if x != "__pycache__"]  # bytecode only: no .py there to find
        rel = os.path.relpath(d, rdir)
        found += [(f if rel == "." else f"{rel}/{f}".replace(os.sep, "/")) for f in names if f.endswith(".py")]
    out = [("remote/" + rel, os.path.join(rdir, rel)) for rel in sorted(found, key=lambda r: r.split("/"))]
    runtime = os.path.join(tdir, "runtime", "gpujob_runtime.py")
    if os.path.isfile(runtime):
        out.append(("runtime/gpujob_runtime.py", runtime))
    # the agent's checkpoint package (relative imports only), under a name no user module takes
    for prefix, folder in (("runtime/gpujob_checkpoints/", os.path.join(rdir, "ckpt", "checkpoints")),
                           ("runtime/autohook/", os.path.join(tdir, "runtime", "autohook"))):  # the Trainer stop hook
        names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
        out += [(prefix + f, os.path.join(folder, f)) for f in names if f.endswith(".py")]
    return out


def bundle_files() -> dict[str, Path]:
    """Archive name -> source file for everything uploaded to ``<root>/agent/<version>/``."""
    return {name: Path(path) for name, path in _bundle_paths()}


@lru_cache(maxsize=1)
def bundle_version() -> str:
    """Package version plus a hash of the bundle's content: a changed agent is a new upload.

    Hashing the bundle's ~150 files cost every command that talks to an agent 10-25 ms; the
    version is kept in the cache folder beside the files' stat lines (name, size, mtime, ctime,
    inode: any write changes the ctime), and hashed again only when one of those changed."""
    files = _bundle_paths()
    stats = "\n".join(f"{name} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}"
                      for name, st in ((name, os.stat(path)) for name, path in files))
    from gpujob.version import __version__

    stamp = f"{__version__}\n{stats}"
    kept: Path | None = None
    try:
        from gpujob.userdirs import cache_dir

        kept = cache_dir() / "bundle-version"
        version, _, was = kept.read_text().partition("\n")
        if was == stamp and version:
            return version
    except (OSError, ValueError):  # none kept yet (or no cache folder: kept stays None)
        pass
    version = _content_version(files, __version__)
    if kept is not None:
        try:
            import_remote("core.atomicfile").write(kept, f"{version}\n{stamp}", 0o600, durable=False)
        except OSError:  # a read-only cache folder: hashed again next time, nothing lost
            pass
    return version


def _content_version(files: list[tuple[str, str]], version: str) -> str:
    import hashlib  # only a command that talks to an agent: the defaults in remote/core/spec.py load without it

    h = hashlib.sha256()
    for name, path in files:
        with open(path, "rb") as f:
            h.update(name.encode() + b"\0" + f.read() + b"\0")
    return f"{version}-{h.hexdigest()[:10]}"


BUNDLE_END = ".bundle-whole"  # the bundle's last member


def bundle_tar() -> bytes:
    """The bundle as an uncompressed tar (a few dozen KB)."""
    import io
    import tarfile  # only an agent's install packs it: status and ls, which import this module, never do

    buf = io.BytesIO()
    members = [(name, path.read_bytes()) for name, path in bundle_files().items()]
    # last: the install takes the tree as whole only with it (tar ends without an error when its input is
    # cut between two members, as when the laptop is killed mid-upload)
    members.append((BUNDLE_END, b"whole\n"))
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
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
