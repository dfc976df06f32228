"""Moving trees in one round trip: a manifest out, a verified stream in, a verified stream out.

The stream format, part files and content hashes are in ``remote/stream/``. The agent keeps
a hash cache (``<root>/cache/hashes.json``) filled by every received file, so a manifest with
hashes costs no rereading of data it received itself.
"""

import json
import os
import stat
from pathlib import Path, PurePosixPath
from typing import IO, Any, Dict, Iterable, List, Optional

from remote.core import atomicfile, layout
from remote.core.layout import read_doc
from remote.data.pullselect import appended_only, ckpt_target, portable_link, select, stray_hint  # noqa: F401 (the pull verbs use select, stray_hint, appended_only from here)
from remote.stream import (
    CHUNK,
    HashCache,
    Item,
    delete_paths,
    fill_hashes,
    find_stamp,
    matching_prefix,
    read_items,
    tree,
    tree_digest,
    write_items,
)
from remote.stream.receive import Readable, Received
from remote.stream.tree import Tree


def hash_cache(root: Path) -> HashCache:
    return HashCache(root / "cache" / "hashes.json")


def manifest(base: Path, cache: Optional[HashCache] = None, hash_all: bool = False) -> Tree:
    """{"files": {rel: [size, mtime_ns, mode, link, hash]}, "dirs": [...], "parts": {rel: chunks}}."""
    return tree(base, cache, hash_all)


def receive(base: Path, stream: Readable, cache: Optional[HashCache] = None) -> Received:
    """Apply an upload stream under ``base`` (symlinks may point anywhere: they are the user's);
    then a detached ``reseal`` brings the changed trees' seals up to date, so the next no-op's
    manifest is the fast one."""
    try:
        res = read_items(base, stream, links_out=True, cache=cache)
    finally:
        spawn_reseal(base)
    return res


def spawn_reseal(root: Path) -> None:
    import subprocess
    import sys

    agent = str(layout.AGENT_DIR)
    try:
        subprocess.Popen([sys.executable, "-S", "-m", "remote", "--root", str(root), "reseal"], cwd=agent,
                         env=dict(os.environ, PYTHONPATH=agent), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except OSError:
        pass  # only speed is lost: the next manifest computes the digest itself


def reseal(root: Path) -> Dict[str, List[str]]:
    """Recompute the seal (stamp and digest) of every known tree whose stamp moved (the
    ``reseal`` verb, started detached after a receive). A tree still racily new is waited for."""
    import time

    seals = read_doc(root / "cache" / "trees.json")
    done = []  # type: List[str]
    todo = sorted(seals)
    for wait in (0.2, 2.1):  # a fine-grained racy window, then a whole-second one
        time.sleep(wait)
        later = []
        for d in todo:
            stamp = find_stamp(root / d)
            seal = seals.get(d)
            if stamp is None:
                later.append(d)
            elif not (isinstance(seal, list) and seal[0] == stamp):
                manifest_doc(root, [d], [])  # walks, reads the hash cache, stores the seal
                done.append(d)
        todo = later
        if not todo:
            break
    return {"resealed": done}


def delete(base: Path, rels: List[str], cache: Optional[HashCache] = None) -> int:
    return delete_paths(base, rels, cache)


def send_list(base: Path, wanted: List[Any], out: IO[bytes], write_wait: Optional[float] = None,
              sources: Optional[Dict[str, str]] = None) -> None:
    """Stream ``wanted`` ([rel, prefix_chunks] pairs, or bare rel strings) from ``base``.

    A prefix is honoured only if this side's file starts with the same chunks. With
    ``write_wait`` (a pull), a file some process holds open for writing is waited for that
    long, then left out, as is one that changes while it is read: the end record lists them
    under ``held``, and nothing unfinished arrives as pulled. ``sources``: rel -> the file under ``base``
    sent in its place (the manifest's kept copy of a checkpoint cut short)."""
    places = []  # type: List[Any]
    items = []  # type: List[Item]
    root = base.resolve()
    real = ckpt_target(base)
    for w in wanted:
        rel, prefix = (w, []) if isinstance(w, str) else (w[0], list(w[1] or []))
        p = PurePosixPath(rel)
        if p.is_absolute() or ".." in p.parts or not p.parts:
            continue
        full = base.joinpath(*p.parts)
        inside = root
        if sources and rel in sources and ".." not in PurePosixPath(sources[rel]).parts:
            places.append((rel, prefix, base.joinpath(*PurePosixPath(sources[rel]).parts)))
            continue
        if real is not None and p.parts[0] == "ckpt":  # the job's own checkpoint link is followed
            full, inside = real.joinpath(*p.parts[1:]), real
            if len(p.parts) == 1:
                items.append(Item(rel, full, mode=stat.S_IMODE(os.stat(str(full)).st_mode), is_dir=True))
                continue
        if inside not in full.parent.resolve().parents and full.parent.resolve() != inside:
            continue
        places.append((rel, prefix, full))
    held = {}  # type: Dict[str, List[int]]  # path -> the pids still writing it
    if write_wait is not None:  # before the files are looked at: what a writer finishes is sent whole
        from remote.ckpt import writing

        # the logs grow by appends while the job runs: any moment's copy of them is a true one
        held = writing.wait_closed([str(f) for r, _, f in places if not appended_only(r)
                                    and f.is_file() and not f.is_symlink()], write_wait)
    for rel, prefix, full in places:
        if str(full) in held:
            continue
        try:
            st = os.lstat(str(full))
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            items.append(Item(rel, full, link=portable_link(base, full, os.readlink(str(full)))))
        elif stat.S_ISDIR(st.st_mode):
            items.append(Item(rel, full, mode=stat.S_IMODE(st.st_mode), is_dir=True))
        elif stat.S_ISREG(st.st_mode):
            if prefix:
                prefix = matching_prefix(full, prefix, st.st_size)
                if len(prefix) * CHUNK >= st.st_size:
                    prefix = prefix[:max(0, (st.st_size - 1) // CHUNK)]
            items.append(Item(rel, full, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), prefix=prefix))
    if write_wait is None:
        write_items(out, items)
    else:
        write_items(out, items, end={"held": sorted(held_rel(base, held))}, changed=[])


def held_rel(base: Path, held: Iterable[str]) -> List[str]:
    """The paths of ``held`` (files under ``base``) relative to it, as the pull names them."""
    return [Path(p).relative_to(base).as_posix() for p in held]


def send(base: Path, members: List[str], out: IO[bytes]) -> None:
    """Stream whole trees ``members`` (relative to ``base``), old-style."""
    wanted = []  # type: List[Any]
    for m in members:
        t = tree(base / m)
        if not t["exists"]:
            continue
        if (base / m).is_dir():
            wanted.append(m)
        wanted += sorted([m + "/" + d for d in t["dirs"]])
        wanted += sorted(m + ("/" + r if r else "") for r in t["files"])
    send_list(base, wanted, out)


def manifest_doc(root: Path, dirs: List[str], hash_dirs: List[str], cache: Optional[HashCache] = None,
                 known: Optional[List[str]] = None, shapes: Optional[List[str]] = None) -> Dict[str, object]:
    """What is under each of ``dirs`` and ``hash_dirs`` (with content hashes, from the cache, and
    the tree's digest), and the free bytes. ``known`` (``DIR=DIGEST``: what the client's record
    says it left there): a tree whose digest is that one answers ``same`` without its files.

    ``<root>/cache/trees.json`` remembers each tree's stamp (a digest of its stats: GNU find's
    listing where there is one, else the Python walk's) with its content digest: while the stamp
    stays the same the digest is known without the hash cache (and, with find, without a walk
    in Python)."""
    expect = dict(k.split("=", 1) for k in known or [] if "=" in k)
    seeds = dict(k.split("=", 1) for k in shapes or [] if "=" in k)
    if seeds:  # a project's first staging of a data: entry: from one of the same shape already here
        from remote.data import datastore

        cache = cache or hash_cache(root)
        datastore.seed(root, {d: seeds[d] for d in hash_dirs if d in seeds}, cache)
    seals_path = root / "cache" / "trees.json"
    seals = read_doc(seals_path)
    changed = False
    doc = {}  # type: Dict[str, object]
    for d in dirs + hash_dirs:
        fast = find_stamp(root / d)
        seal = seals.get(d)
        if fast is not None and isinstance(seal, list) and seal[0] == fast and expect.get(d) == seal[1]:
            doc[d] = {"same": True, "digest": seal[1], "parts": {}, "exists": True}  # no walk in Python
            continue
        t = manifest(root / d)
        stamp = fast or t.pop("stamp", None)
        t.pop("stamp", None)
        digest = seal[1] if stamp is not None and isinstance(seal, list) and seal[0] == stamp else None
        if digest is None or expect.get(d) != digest:  # the files go back: with their hashes
            cache = cache or hash_cache(root)
            fill_hashes(root / d, t, cache, True)
            if d in hash_dirs and d.startswith("projects/"):  # a job may have rewritten a staged file's blob
                from remote.data import datastore

                if datastore.is_staged(d):
                    datastore.recheck_staged(root, root / d, t, cache)
            digest = tree_digest(t["files"], t["dirs"])
            if stamp is not None and digest is not None:
                seals[d] = [stamp, digest]
                changed = True
            elif d not in seals:  # known now: the reseal after a receive looks at it
                seals[d] = [None, None]
                changed = True
        t.pop("inos", None)
        t["digest"] = digest
        if digest is not None and expect.get(d) == digest:
            t = {"same": True, "digest": digest, "parts": t["parts"], "exists": t["exists"]}
        doc[d] = t
    if cache is not None:
        cache.save()
    if changed:  # under the file's lock, over what others sealed meanwhile: only this walk's trees change
        mine = {d: seals[d] for d in dirs + hash_dirs if d in seals}
        seals_path.parent.mkdir(parents=True, exist_ok=True)
        atomicfile.update_json(seals_path, lambda doc: doc.update(mine), durable=False)
    st = os.statvfs(str(root))
    doc["free_bytes"] = st.f_bavail * st.f_frsize
    return doc


def session(root: Path, dirs: List[str], hash_dirs: List[str], stdin: IO[bytes], stdout: IO[bytes],
            known: Optional[List[str]] = None, shapes: Optional[List[str]] = None) -> Received:
    """Manifest and receive over one exec channel: write the manifest as one JSON line, then
    apply the stream that follows on stdin (none = nothing to do). Returns the receive result."""
    doc = manifest_doc(root, dirs, hash_dirs, None, known, shapes)
    stdout.write(json.dumps(doc).encode() + b"\n")
    stdout.flush()
    first = stdin.read(1)
    if not first:
        return {"written": 0, "deleted": 0, "bytes": 0}
    return receive(root, _Prepend(first, stdin), hash_cache(root))


class _Prepend:
    """A read-only stream with ``head`` put back in front of ``rest``."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self.head, self.rest = head, rest

    def read(self, n: int = -1) -> bytes:
        if self.head:
            h, self.head = self.head, b""
            if n is None or n < 0:
                return h + self.rest.read()
            return h + self.rest.read(n - len(h)) if n > len(h) else h
        return self.rest.read(n)

    def read1(self, n: int = -1) -> bytes:
        if self.head:
            h, self.head = self.head, b""
            return h
        read1 = getattr(self.rest, "read1", None)
        return read1(n) if read1 else self.rest.read(n)
