"""Moving trees in one round trip: a manifest out, a tar stream in, a tar stream out.

Received files are written under a temporary name and renamed into place, so a reader
(and a job's hard-linked snapshot) never sees a half-written file.
"""

import json
import os
import stat
import tarfile
from pathlib import Path
from typing import IO, Any, Dict, Iterable, List

CONTROL = ".gpujob-sync.json"


def manifest(base: Path) -> Dict[str, Any]:
    """{"files": {rel: [size, mtime_s, mode, link]}, "dirs": [rel, ...]} of a tree (missing = empty)."""
    files: Dict[str, List[Any]] = {}
    dirs: List[str] = []
    if base.is_file() or base.is_symlink():
        st = os.lstat(str(base))
        link = os.readlink(str(base)) if base.is_symlink() else None
        files[""] = [st.st_size, int(st.st_mtime), stat.S_IMODE(st.st_mode), link]
        return {"files": files, "dirs": dirs, "exists": True}
    if not base.is_dir():
        return {"files": files, "dirs": dirs, "exists": False}
    for dirpath, dirnames, filenames in os.walk(str(base)):
        rel_dir = os.path.relpath(dirpath, str(base))
        for name in list(dirnames) + filenames:
            full = os.path.join(dirpath, name)
            rel = name if rel_dir == "." else rel_dir + "/" + name
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                files[rel] = [0, 0, 0o777, os.readlink(full)]
            elif stat.S_ISDIR(st.st_mode):
                dirs.append(rel)
            elif stat.S_ISREG(st.st_mode) and ".gpujob-part" not in name:
                files[rel] = [st.st_size, int(st.st_mtime), stat.S_IMODE(st.st_mode), None]
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    return {"files": files, "dirs": dirs, "exists": True}


def _safe_target(base: Path, name: str) -> Path:
    if name.startswith("/") or ".." in Path(name).parts:
        raise ValueError("refusing unsafe path {!r}".format(name))
    target = base / name
    if not str(target.resolve()).startswith(str(base.resolve())):
        raise ValueError("refusing path outside the target: {!r}".format(name))
    return target


def receive(base: Path, stream: IO[bytes]) -> Dict[str, Any]:
    """Unpack a tar stream into ``base``; a ``.gpujob-sync.json`` member lists deletions."""
    base.mkdir(parents=True, exist_ok=True)
    written, deleted, nbytes = 0, 0, 0
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        for m in tar:
            if m.name == CONTROL:
                f = tar.extractfile(m)
                ctl = json.loads(f.read().decode()) if f else {}
                deleted += delete(base, ctl.get("delete", []))
                continue
            target = _safe_target(base, m.name)
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".gpujob-part")
            if m.issym():
                if os.path.lexists(str(tmp)):
                    os.unlink(str(tmp))
                os.symlink(m.linkname, str(tmp))
            elif m.isfile():
                src = tar.extractfile(m)
                assert src is not None
                with open(str(tmp), "wb") as out:
                    while True:
                        chunk = src.read(1 << 20)
                        if not chunk:
                            break
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())
                os.chmod(str(tmp), m.mode & 0o7777)
                os.utime(str(tmp), (m.mtime, m.mtime))
                nbytes += m.size
            else:
                continue
            if target.is_dir() and not target.is_symlink():
                import shutil

                shutil.rmtree(str(target))
            os.replace(str(tmp), str(target))
            written += 1
    return {"written": written, "deleted": deleted, "bytes": nbytes}


def delete(base: Path, rels: Iterable[str]) -> int:
    n = 0
    for rel in sorted(rels, key=lambda r: -r.count("/")):
        try:
            target = _safe_target(base, rel)
        except ValueError:
            continue
        try:
            if target.is_dir() and not target.is_symlink():
                os.rmdir(str(target))
            else:
                os.unlink(str(target))
            n += 1
        except OSError:
            pass
    return n


def send(base: Path, members: List[str], out: IO[bytes]) -> None:
    """Write a tar stream of ``members`` (paths relative to ``base``) to ``out``."""
    with tarfile.open(fileobj=out, mode="w|") as tar:
        for rel in members:
            full = base / rel
            if full.exists() or full.is_symlink():
                tar.add(str(full), arcname=rel, recursive=True)
