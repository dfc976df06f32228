"""Which version of a checkpoint this is, by content, never by name (standard library only).

A checkpoint rewritten under one name (nanoGPT's ``ckpt.pt``, ``last.ckpt``, an HF ``checkpoint-last``
folder) keeps its name from save to save, so a name on a mirror or in a pull's folder says nothing
about which save it holds. Two measures do:

* ``stamp``   each file's (path, size, mtime_ns, inode): read with ``stat`` only, so the uploader can
              ask it every pass; a different stamp means a new save (or a touch, a move) to hash again
* ``digest``  each file's size and SHA-256, and ``version``: one hash over them; the marker records
              both, and whoever reads the mirror checks what arrived against them (``mismatch``)
"""

import hashlib
import os
from pathlib import Path
from typing import Any, Dict, List, TypedDict

CHUNK = 1 << 20


class FileDigest(TypedDict):
    """One file of a checkpoint version: its size and its SHA-256 (hex)."""

    size: int
    sha256: str


def _files(path: Path, is_dir: bool) -> List[str]:
    """The checkpoint's files, relative to the folder and '/'-separated (its own name when a file)."""
    if not is_dir:
        return [path.name]
    found = []
    for top, _dirs, names in os.walk(str(path)):
        rel = os.path.relpath(top, str(path))
        found += [n if rel == "." else "{}/{}".format(rel.replace(os.sep, "/"), n) for n in names]
    return sorted(found)


def _file(path: Path, is_dir: bool, rel: str) -> Path:
    return path / rel if is_dir else path


def stamp(path: Path, is_dir: bool) -> List[List[Any]]:
    """``[[rel, size, mtime_ns, inode], ...]``: changes with every save (a temporary file renamed over
    the name is a new inode even within one tick of the clock), read without opening a file."""
    out = []
    for rel in _files(path, is_dir):
        st = os.stat(str(_file(path, is_dir, rel)))
        out.append([rel, st.st_size, st.st_mtime_ns, st.st_ino])
    return out


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(str(path), "rb") as f:
        while True:
            block = f.read(CHUNK)
            if not block:
                return h.hexdigest()
            h.update(block)


def digest(path: Path, is_dir: bool) -> Dict[str, FileDigest]:
    """``{rel: {size, sha256}}`` of every file of the checkpoint."""
    out = {}  # type: Dict[str, FileDigest]
    for rel in _files(path, is_dir):
        f = _file(path, is_dir, rel)
        out[rel] = {"size": f.stat().st_size, "sha256": sha256(f)}
    return out


def version(files: Dict[str, FileDigest]) -> str:
    """One hash over the files' names, sizes and hashes: equal versions hold equal bytes."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update("{}\0{}\0{}\n".format(rel, files[rel].get("size"), files[rel].get("sha256")).encode())
    return h.hexdigest()[:24]


def mismatch(path: Path, is_dir: bool, files: Dict[str, FileDigest]) -> str:
    """Why the checkpoint at ``path`` is not the version ``files`` describes ('' when it is)."""
    if not path.exists() or path.is_dir() != is_dir:
        return "not there"
    have = _files(path, is_dir)
    if sorted(have) != sorted(files):
        extra, missing = sorted(set(have) - set(files)), sorted(set(files) - set(have))
        return "its files differ ({}{})".format("missing " + ", ".join(missing[:3]) if missing else "",
                                                ("; extra " if missing else "extra ") + ", ".join(extra[:3]) if extra else "")
    for rel in sorted(files):
        f = _file(path, is_dir, rel)
        want = files[rel]
        if f.stat().st_size != want.get("size"):
            return "{}: {} bytes, the marker says {}".format(rel, f.stat().st_size, want.get("size"))
    for rel in sorted(files):  # sizes first: a cut file is named without reading the rest
        if sha256(_file(path, is_dir, rel)) != files[rel].get("sha256"):
            return "{}: its content differs from the version the marker names".format(rel)
    return ""
