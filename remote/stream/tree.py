"""Listing a tree: the walk with its content hashes, part files and change stamp, GNU find's
faster listing and stamp, and one digest of a tree's content."""

import hashlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple, TypedDict

from .hashing import HashCache
from .parts import SIDECAR, TMP_PREFIX, is_tmp_name, part_chunks

RACY_NS = 2 * 10 ** 9  # a stat this close to the clock may not show the next change (whole-second stamps)
FINE_RACY_NS = 10 ** 8  # the same where stamps have sub-second digits (a kernel tick is at most 10 ms)


def racy(stamp_ns: int, now_ns: int) -> bool:
    """A stamp so close to ``now_ns`` that a change in the same timestamp tick could follow
    unseen (git's "racily clean"): the window is 2 s on file systems with whole-second stamps."""
    return stamp_ns > now_ns - (RACY_NS if stamp_ns % 10 ** 9 == 0 else FINE_RACY_NS)


def find_listing(base: Path, prune: Iterable[str] = (), now_ns: Optional[int] = None,
                 allow_racy: bool = False) -> Optional[bytes]:
    """GNU find's listing of everything under ``base``: per name ``%C@ %T@ %y %m %s %i %P`` (ctime,
    mtime, type, mode, size, inode, path), NUL-terminated; a C walk, several times faster than
    one in Python. None where there is no GNU find, the walk failed, a temporary name of ours is
    there (its part files must be listed) or the newest ctime is racily close to ``now_ns``
    (see ``racy``; unless ``allow_racy``). Folders named in ``prune`` are not entered."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    cmd = ["find", str(base)]
    names = list(prune)
    if names:
        cmd.append("(")
        for n in names:
            cmd += ["-name", n, "-o"]
        cmd[-1:] = [")", "-prune", "-o"]
    cmd += ["-printf", "%C@ %T@ %y %m %s %i %P\\0"]
    import subprocess  # here: the laptop loads this module on paths that never walk

    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                           env=dict(os.environ, LC_ALL="C"), timeout=600)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    out = r.stdout
    if r.returncode != 0 or not out or TMP_PREFIX.encode() in out:
        return None
    if allow_racy:
        return out
    try:
        ctime = find_ns(max(out.split(b"\0"))[:32].split(b" ", 1)[0])  # ctime first, fixed width until 2286
    except ValueError:
        return None
    return None if racy(ctime, now_ns) else out


def drop_racy(listing: bytes, now_ns: int) -> Tuple[bytes, bool]:
    """``listing`` without the lines whose ctime is racily close to ``now_ns`` (a later look
    sees them as changed and checks them again), and whether there were any."""
    try:
        if not racy(find_ns(max(listing.split(b"\0"))[:32].split(b" ", 1)[0]), now_ns):
            return listing, False
        keep = [line for line in listing.split(b"\0") if line and not racy(find_ns(line.split(b" ", 1)[0]), now_ns)]
    except ValueError:
        return b"", True
    return b"".join(line + b"\0" for line in keep), True


def find_ns(stamp: bytes) -> int:
    """Nanoseconds of a find ``%T@``/``%C@`` field (seconds, a dot, ten digits)."""
    sec, _, frac = stamp.partition(b".")
    return int(sec) * 10 ** 9 + int((frac + b"000000000")[:9])


def find_stamp(base: Path, prune: Iterable[str] = (), now_ns: Optional[int] = None) -> Optional[str]:
    """A stamp of everything under ``base`` (``find_listing``'s digest), or None."""
    out = find_listing(base, prune, now_ns)
    return None if out is None else "find:" + hashlib.sha256(out).hexdigest()


class Tree(TypedDict, total=False):
    """``tree``'s answer (see there); a manifest adds ``digest``, or stands in ``same`` with the digest alone."""
    files: Dict[str, List[Any]]  # rel -> [size, mtime_ns, mode, link, hash]
    dirs: List[str]
    parts: Dict[str, List[str]]
    exists: bool
    stamp: Optional[str]
    inos: Dict[str, int]
    digest: Optional[str]
    same: bool


def tree_digest(files: Dict[str, List[Any]], dirs: Iterable[str]) -> Optional[str]:
    """One digest of a tree's names, modes, content hashes and link targets (not its mtimes):
    equal digests on both ends mean nothing to send. None when a file's hash is unknown.
    It is the sum (mod 2**256) of one sha256 per entry, so the digest of a whole tree is the
    sum of its parts' digests: the laptop moves it by the entries that changed."""
    total = 0
    for rel, v in files.items():
        if v[3] is not None:
            line = "l\0{}\0{}".format(rel, v[3])
        elif v[4] is None:
            return None
        else:
            line = "f\0{}\0{:o}\0{}".format(rel, v[2] & 0o7777, v[4])
        total += int.from_bytes(hashlib.sha256(line.encode("utf-8", "surrogateescape")).digest(), "big")
    for d in dirs:
        total += int.from_bytes(hashlib.sha256(("d\0" + d).encode("utf-8", "surrogateescape")).digest(), "big")
    return "{:064x}".format(total % (1 << 256))


def tree(base: Path, cache: Optional[HashCache] = None, hash_all: bool = False) -> "Tree":
    """``{"files": {rel: [size, mtime_ns, mode, link, hash]}, "dirs": [...], "parts": {rel: chunks},
    "exists", "stamp"}``.

    ``hash`` comes from ``cache`` (computed on a miss when ``hash_all``), else None. Temporary
    names are left out; a large file's part file is listed under its final name in ``parts``.
    ``stamp`` is a digest of every name's type, mode, size, mtime_ns, inode and ctime (the tree
    did not change while it stays the same), None when a stamp was too close to the clock to
    tell the next change (see ``racy``).
    """
    now = time.time_ns()  # before the walk: a change during it is newer than this
    files = {}  # type: Dict[str, List[Any]]
    dirs = []  # type: List[str]
    parts = {}  # type: Dict[str, List[str]]
    lines = []  # type: List[str]
    inos = {}  # type: Dict[str, int]
    newest = 0
    out = {"files": files, "dirs": dirs, "parts": parts, "exists": True}  # type: Tree
    if base.is_symlink() or base.is_file():
        st = os.lstat(str(base))
        if stat.S_ISLNK(st.st_mode):
            files[""] = [0, 0, 0o777, os.readlink(str(base)), None]
        else:
            files[""] = [st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), None, None]
            inos[""] = st.st_ino
        lines.append("{}\0{}\0{}\0{}\0{}".format(st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns))
        newest = max(st.st_mtime_ns, st.st_ctime_ns)
    elif not base.is_dir():
        ch = part_chunks(base)  # a single-file entry's part file sits beside it
        if ch:
            parts[""] = ch
        if cache is not None:
            cache.prune(str(base), [])
        out["exists"] = False
        out["stamp"] = None
        return out
    else:
        stack = [(str(base), "")]
        s_isdir, s_isreg, s_islnk, s_imode = stat.S_ISDIR, stat.S_ISREG, stat.S_ISLNK, stat.S_IMODE
        add = lines.append
        while stack:
            path, rel_dir = stack.pop()
            try:
                with os.scandir(path) as it:
                    ents = sorted(it, key=lambda e: e.name)
            except OSError:
                continue
            for e in ents:
                name = e.name
                if (name[0] == "." or "gpujob-part" in name) and is_tmp_name(name):
                    if name.endswith(SIDECAR) and name.startswith(TMP_PREFIX):
                        _part_of(e.path, rel_dir, parts)
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                rel = rel_dir + name
                mode, mt, ct = st.st_mode, st.st_mtime_ns, st.st_ctime_ns
                add("{}\0{}\0{}\0{}\0{}\0{}".format(rel, mode, st.st_size, mt, st.st_ino, ct))
                if mt > newest or ct > newest:
                    newest = max(mt, ct)
                if s_isreg(mode):
                    files[rel] = [st.st_size, mt, s_imode(mode), None, None]
                    inos[rel] = st.st_ino
                elif s_isdir(mode):
                    dirs.append(rel)
                    stack.append((e.path, rel + "/"))
                elif s_islnk(mode):
                    files[rel] = [0, 0, 0o777, os.readlink(e.path), None]
    out["stamp"] = None if racy(newest, now) else hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).hexdigest()
    out["inos"] = inos
    if cache is not None:
        fill_hashes(base, out, cache, hash_all)
    return out


def fill_hashes(base: Path, t: "Tree", cache: HashCache, hash_all: bool = False) -> None:
    """Content hashes into a ``tree`` from ``cache`` (read on a miss when ``hash_all``); the cache
    drops the entries of files that are gone."""
    top = str(base)
    data = cache.data
    seen = []  # type: List[str]
    inos = t.get("inos", {})
    for rel, v in t["files"].items():
        if v[3] is not None:
            continue
        full = top + "/" + rel if rel else top
        seen.append(full)
        rec = data.get(full)
        if rec is not None and len(rec) == 4 and rec[0] == v[0] and rec[1] == v[1] and rec[2] == inos.get(rel):
            v[4] = rec[3]
        elif hash_all or rec is not None:
            try:
                st = os.lstat(full)
            except OSError:
                continue
            v[4] = cache.hash(full, st) if hash_all else cache.get(full, st)  # type: ignore[arg-type]
    if t.get("exists"):
        cache.prune(top, seen)


def _part_of(sidecar: str, rel_dir: str, parts: Dict[str, List[str]]) -> None:
    """List the part file a sidecar describes under its final name (its verified chunks)."""
    try:
        with open(sidecar) as f:
            name = json.load(f).get("name")
    except (OSError, ValueError, AttributeError):
        return
    if isinstance(name, str) and name and "/" not in name:
        ch = part_chunks(Path(os.path.dirname(sidecar)) / name)
        if ch:
            parts[rel_dir + name] = ch
