"""Verified, resumable file streams shared by both ends (upload receive, pull extract).

Standard library only, Python 3.8+, no imports from the rest of ``remote`` (the laptop loads
this file by path). The wire format is gpujob's own framing, optionally wrapped whole in
gzip/xz/bz2 (the reader tells them apart by their magic bytes): ``GJS1``, then records, each
one type byte, a 4-byte big-endian length and that many bytes of JSON header, then the payload
the header announces:

- ``B`` (batch): small files (at most one chunk), folders and symlinks, up to ``BATCH_FILES``
  entries or ``BATCH_BYTES``: ``[["f", name, mode, mtime_ns, size, hash] | ["d", name, mode] |
  ["l", name, target], ...]``, then the files' bytes concatenated in that order (tar headers
  and one Python call chain per member cost more than everything else on a tree of small
  files);
- ``F`` (large file): ``{"n", "mode", "mtime", "size", "off"}``, then bytes ``off..size``
  (``off``, a whole number of chunks, resumes a part file), then a ``V`` record ``{"h"}``;
- ``X``: ``{"delete": [names]}``; ``E``: the end (a stream without it was cut).

A file is received under a short temporary name in its folder (``.gpujob-<24 hex digits of
the name's hash>.part``: it fits NAME_MAX whatever the name's length) and renamed into place
only after its hash checks out, so it is never visible half-written under its final name
(and the rename gives a new inode, so hard-linked job snapshots keep their old content). Small files are verified in
memory and written by a few threads (create with the mode, write, mtime, rename: the file
system's create cost dominates and overlaps with parsing); the receiver makes them durable
before it saves its hash cache: an fsync each when there are at most ``FSYNC_EACH``, else one
``syncfs`` for the stream. The part file of a large file keeps its verified prefix, synced
before the sidecar ``.gpujob-<hash>.json`` lists the final name and the prefix's chunk hashes,
so a cut transfer resumes where it stopped. Mtimes travel in nanoseconds.

Content hash: sha256 over the concatenated sha256 digests of 4 MiB chunks (one empty chunk
for an empty file), so a resumed file is verified without rereading its prefix.
"""

import hashlib
import json
import os
import queue
import shutil
import signal
import stat
import struct
import threading
import time
import zlib
from pathlib import Path
from typing import IO, Any, Callable, Dict, Iterable, List, Optional, Tuple

CHUNK = 4 << 20
TMP_PREFIX = ".gpujob-"  # temporary names: TMP_PREFIX + a hash of the final name + a suffix
PART = ".part"  # a file being received (small ones for a moment, a large one until verified)
SIDECAR = ".json"  # beside a large file's part file: its final name and verified chunk hashes
LEGACY_PART = ".gpujob-part"  # the suffix older agents appended to the final name
RACY_NS = 2 * 10 ** 9  # a stat this close to the clock may not show the next change (whole-second stamps)
FINE_RACY_NS = 10 ** 8  # the same where stamps have sub-second digits (a kernel tick is at most 10 ms)


def racy(stamp_ns: int, now_ns: int) -> bool:
    """A stamp so close to ``now_ns`` that a change in the same timestamp tick could follow
    unseen (git's "racily clean"): the window is 2 s on file systems with whole-second stamps."""
    return stamp_ns > now_ns - (RACY_NS if stamp_ns % 10 ** 9 == 0 else FINE_RACY_NS)
MAGIC = b"GJS1"
BATCH_FILES = 256  # small files per batch record (smaller batches start the receiver sooner)
BATCH_BYTES = 8 << 20
MAX_HEAD = 16 << 20  # a larger record header is refused as corrupt
MAX_BATCH = 64 << 20
WRITERS = 4  # receiver threads writing small files (GPUJOB_SYNC_WRITERS overrides)
SIDECAR_EVERY = 4  # chunks between sidecar writes
FSYNC_EACH = 64  # up to this many small files are fsynced each; more get one syncfs
_REC = struct.Struct(">cI")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class TransferError(Exception):
    """A refused or corrupt member; the message names it."""


class Hasher:
    """Incremental content hash (see the module doc); ``chunks`` seeds a resumed prefix."""

    def __init__(self, chunks: Optional[List[str]] = None) -> None:
        self.chunks = list(chunks or [])
        self.cur = hashlib.sha256()
        self.n = 0

    def update(self, data: bytes) -> int:
        """Add bytes; returns how many chunks were completed."""
        done = 0
        mv = memoryview(data)
        while len(mv):
            take = min(CHUNK - self.n, len(mv))
            self.cur.update(mv[:take])
            self.n += take
            mv = mv[take:]
            if self.n == CHUNK:
                self.chunks.append(self.cur.hexdigest())
                self.cur, self.n = hashlib.sha256(), 0
                done += 1
        return done

    def hexdigest(self) -> str:
        parts = list(self.chunks)
        if self.n or not parts:
            parts.append(self.cur.hexdigest())
        return hashlib.sha256("".join(parts).encode()).hexdigest()


_SHA256 = hashlib.sha256()  # copied, never updated: a copy costs less than a new OpenSSL context


def _sha256(data: Any) -> Any:
    h = _SHA256.copy()
    h.update(data)
    return h


def small_hash(data: Any) -> str:
    """The content hash of at most one chunk (what ``Hasher`` gives), in one call."""
    return _sha256(_sha256(data).hexdigest().encode()).hexdigest()


def file_hash(path: Path, limit: Optional[int] = None) -> Hasher:
    """Hash a file (or its first ``limit`` bytes)."""
    h = Hasher()
    left = limit
    with open(str(path), "rb") as f:
        while left is None or left > 0:
            data = f.read(1 << 20 if left is None else min(1 << 20, left))
            if not data:
                break
            h.update(data)
            if left is not None:
                left -= len(data)
    return h


class HashCache:
    """Content hashes by absolute path, valid while (size, mtime_ns, inode) stay the same.

    Kept as ``<path>`` (a JSON object) plus ``<path>.log`` (one JSON line per change since),
    read only when a hash is looked up: a receive that adds one file to a tree of 100,000
    appends one line instead of reading and rewriting the whole cache. ``save`` folds the log
    into the object once it has grown past a quarter of it."""

    def __init__(self, path: Optional[Path]) -> None:
        self.path = path
        self._data = None  # type: Optional[Dict[str, List[Any]]]
        self.ops = []  # type: List[List[Any]]  # [path, entry or None] not yet saved
        self.lock = threading.Lock()

    @property
    def data(self) -> Dict[str, List[Any]]:
        if self._data is None:
            self._data = self._read()
        return self._data

    def _read(self) -> Dict[str, List[Any]]:
        data = {}  # type: Dict[str, List[Any]]
        if self.path is None:
            return data
        try:
            with open(str(self.path)) as f:
                doc = json.load(f)
            if isinstance(doc, dict):
                data = doc
        except (OSError, ValueError):
            pass
        try:
            with open(str(self.path) + ".log", "rb") as f:
                lines = f.read().splitlines()
        except OSError:
            lines = []
        for line in lines:
            try:
                k, rec = json.loads(line.decode("utf-8", "surrogateescape"))
            except (ValueError, TypeError):
                continue  # a torn line of a crashed writer: that entry is only hashed again
            if rec is None:
                data.pop(k, None)
            else:
                data[k] = rec
        return data

    @property
    def dirty(self) -> bool:
        return bool(self.ops)

    @staticmethod
    def _key(st: os.stat_result) -> List[Any]:
        return [st.st_size, st.st_mtime_ns, st.st_ino]

    def set(self, path: str, rec: Optional[List[Any]]) -> None:
        """Record (or, with None, forget) an entry; thread-safe."""
        with self.lock:
            self.ops.append([path, rec])
            if self._data is not None:
                if rec is None:
                    self._data.pop(path, None)
                else:
                    self._data[path] = rec

    def get(self, path: Path, st: os.stat_result) -> Optional[str]:
        rec = self.data.get(str(path))
        return rec[-1] if rec and rec[:-1] == self._key(st) else None

    def put(self, path: Path, h: str, st: Optional[os.stat_result] = None) -> None:
        self.set(str(path), self._key(st or os.stat(str(path))) + [h])

    def hash(self, path: Path, st: Optional[os.stat_result] = None) -> str:
        st = st or os.stat(str(path))
        h = self.get(path, st)
        if h is None:
            h = file_hash(path).hexdigest()
            self.put(path, h, st)
        return h

    def drop(self, path: str) -> None:
        if self._data is None or path in self._data:
            self.set(path, None)

    def prune(self, base: str, keep: Iterable[str]) -> None:
        """Drop entries under folder ``base`` whose path is not in ``keep`` (files gone)."""
        prefix = base.rstrip("/") + "/"
        keep = set(keep)
        for k in [k for k in self.data if k.startswith(prefix) and k not in keep]:
            self.set(k, None)

    def save(self) -> None:
        if self.path is None or not self.ops:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        log = str(self.path) + ".log"
        with self.lock:
            ops, self.ops = self.ops, []
            loaded = self._data is not None  # then set() applied the ops to it already
        try:
            log_size = os.path.getsize(log)
        except OSError:
            log_size = 0
        try:
            base_size = os.path.getsize(str(self.path))
        except OSError:
            base_size = 0
        if log_size + 100 * len(ops) <= max(base_size // 4, 1 << 20):
            data = "".join(json.dumps(op, separators=(",", ":")) + "\n" for op in ops).encode("utf-8", "surrogateescape")
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            return
        full = self.data  # the object and the log ...
        if not loaded:
            for k, rec in ops:  # ... and what this run changed
                if rec is None:
                    full.pop(k, None)
                else:
                    full[k] = rec
        tmp = self.path.with_name(".{}.{}.tmp".format(self.path.name, os.getpid()))
        try:
            with open(str(tmp), "w") as f:
                f.write(json.dumps(full, separators=(",", ":")))  # dumps: C speed; dump() encodes in Python
            os.replace(str(tmp), str(self.path))
        except OSError:  # a full disk: no half-written temp file left behind
            try:
                os.unlink(str(tmp))
            except OSError:
                pass
            raise
        try:
            os.unlink(log)
        except OSError:
            pass


# ---- part files -------------------------------------------------------------------------
def tmp_stem(leaf: str) -> str:
    """The temporary name's stem for final name ``leaf``, in the same folder: short and fixed
    (``.gpujob-`` + 24 hex digits), so it fits NAME_MAX whatever the final name's length and a
    cut transfer finds its part file again."""
    return TMP_PREFIX + _sha256(leaf.encode("utf-8", "surrogateescape")).hexdigest()[:24]


def is_tmp_name(name: str) -> bool:
    """A temporary name of ours (or an older agent's): never listed, never sent."""
    if name.endswith(LEGACY_PART) or name.endswith(LEGACY_PART + ".json") or name.endswith(LEGACY_PART + ".json.tmp"):
        return True
    return name.startswith(TMP_PREFIX) and len(name) >= len(TMP_PREFIX) + 24 and \
        name[len(TMP_PREFIX) + 24:] in (PART, SIDECAR, SIDECAR + ".tmp", PART + ".x")


def part_path(target: Any) -> str:
    """Where ``target`` (a path) is received before it is renamed into place."""
    d, _, leaf = str(target).rpartition("/")
    return d + "/" + tmp_stem(leaf) + PART


def sidecar_path(target: Any) -> str:
    d, _, leaf = str(target).rpartition("/")
    return d + "/" + tmp_stem(leaf) + SIDECAR


def part_chunks(target: Path) -> List[str]:
    """The verified chunk hashes of ``target``'s part file (empty when there is none)."""
    try:
        with open(sidecar_path(target)) as f:
            doc = json.load(f)
        chunks = list(doc.get("chunks", []))
        if doc.get("name", Path(target).name) == Path(target).name and \
                os.path.getsize(part_path(target)) >= len(chunks) * CHUNK:
            return chunks
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    return []


def _save_sidecar(target: Path, chunks: List[str]) -> None:
    side = sidecar_path(target)
    tmp = side + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"name": Path(target).name, "chunks": chunks, "chunk": CHUNK}, f)
    os.replace(tmp, side)


def drop_part(target: Path) -> None:
    for p in (part_path(target), sidecar_path(target)):
        try:
            os.unlink(p)
        except OSError:
            pass


def matching_prefix(path: Path, remote_chunks: List[str], size: int) -> List[str]:
    """The leading chunks of ``remote_chunks`` that match the local file (whole chunks only)."""
    if not remote_chunks:
        return []
    n = min(len(remote_chunks), size // CHUNK)
    local = file_hash(path, n * CHUNK).chunks
    same = []  # type: List[str]
    for a, b in zip(local, remote_chunks):
        if a != b:
            break
        same.append(a)
    return same


# ---- safety -----------------------------------------------------------------------------
def check_name(name: Any) -> List[str]:
    """The parts of a relative name; refuses absolute names, ``..``, ``.`` and empty parts."""
    if not isinstance(name, str) or not name or name[0] == "/" or "\0" in name:
        raise TransferError("refusing {!r}: it would land outside the destination".format(name))
    parts = name.split("/")
    if ".." in parts or "" in parts or "." in parts:
        raise TransferError("refusing {!r}: it would land outside the destination".format(name))
    return parts


class Guard:
    """Where names land under ``base``: refuses traversal, paths through symlinks that leave
    ``base`` and (unless ``links_out``) symlinks pointing outside it. A folder's real path is
    resolved once and cached until a symlink is written."""

    def __init__(self, base: Path, links_out: bool) -> None:
        self.base = str(base)
        self.root = os.path.realpath(self.base)
        self.links_out = links_out
        self.parents = {}  # type: Dict[str, str]
        self.skipped = []  # type: List[str]  # "name -> target" of links not kept (they lead out)
        self.made = []  # type: List[str]  # links written, checked again once the stream is applied

    def inside(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + "/") or self.root == "/"

    def place(self, name: Any) -> Tuple[str, str]:
        """(real parent folder, leaf) of ``name``; the leaf itself is never followed."""
        check_name(name)
        rel_parent, _, leaf = name.rpartition("/")
        parent = self.parents.get(rel_parent)
        if parent is None:
            parent = os.path.realpath(os.path.join(self.base, rel_parent)) if rel_parent else self.root
            if not self.inside(parent):
                raise TransferError("refusing {!r}: a symlink on its way points outside {}".format(name, self.base))
            self.parents[rel_parent] = parent
        return parent, leaf

    def link(self, name: str, parent: str, target: Any) -> bool:
        """Whether to write a symlink: one that resolves outside ``base`` is skipped (unless
        links may point anywhere). Resolved for real, through the links already written, the
        way secure tar extraction does: a chain of links fools a textual check."""
        if not isinstance(target, str) or not target or "\0" in target:
            raise TransferError("refusing link {!r} -> {!r}: not a link target".format(name, target))
        if self.links_out:
            return True
        if target.startswith("/") or not self.inside(os.path.realpath(os.path.join(parent, target))):
            self.skipped.append("{} -> {}".format(name, target))
            return False
        return True

    def recheck(self) -> None:
        """Remove links written here that resolve outside ``base`` now that every entry is in
        place (a later link can redirect an earlier one), until none does."""
        while not self.links_out:
            bad = [p for p in self.made if os.path.islink(p) and not self.inside(os.path.realpath(p))]
            if not bad:
                return
            for p in bad:
                self.skipped.append("{} -> {}".format(os.path.relpath(p, self.root), os.readlink(p)))
                os.unlink(p)
                self.made.remove(p)


def safe_target(base: Path, name: str, kind: str = "f", link: Optional[str] = None, links_out: bool = False) -> Path:
    """Where entry ``name`` (``kind`` f, d or l) lands under ``base``; raises ``TransferError``
    for traversal, paths through links that leave ``base``, other kinds of entry, and
    (unless ``links_out``) links pointing outside."""
    if kind not in ("f", "d", "l"):
        raise TransferError("refusing {!r}: not a file, folder or symlink".format(name))
    g = Guard(base, links_out)
    parent, leaf = g.place(name)
    if kind == "l" and not g.link(name, parent, link):
        raise TransferError("refusing link {!r} -> {!r}: it points outside {}".format(name, link, base))
    return Path(parent) / leaf


# ---- writing ----------------------------------------------------------------------------
class Item:
    """One thing to send: ``arcname`` on the wire, ``path`` here, resumed from ``prefix`` chunks
    (``st``: the stat the size came from, for the sender's hash cache)."""

    __slots__ = ("arcname", "path", "size", "mtime", "mode", "link", "is_dir", "prefix", "st")

    def __init__(self, arcname: str, path: Path, size: int = 0, mtime: int = 0, mode: int = 0o644,
                 link: Optional[str] = None, is_dir: bool = False, prefix: Optional[List[str]] = None,
                 st: Optional[os.stat_result] = None) -> None:
        self.arcname, self.path, self.size, self.mtime, self.mode = arcname, path, size, mtime, mode
        self.link, self.is_dir, self.prefix, self.st = link, is_dir, list(prefix or []), st

    @property
    def offset(self) -> int:
        return len(self.prefix) * CHUNK


def frame(kind: bytes, head: Any) -> bytes:
    """One record header: type byte, length, JSON."""
    doc = json.dumps(head, separators=(",", ":")).encode()
    return _REC.pack(kind, len(doc)) + doc


class Compressed:
    """A write-only wrapper compressing into ``out``: codec ``none``, ``gz:L``, ``xz:L`` or ``bz2:L``.
    ``flush`` makes everything written so far decodable (a zlib sync point)."""

    def __init__(self, out: IO[bytes], codec: str) -> None:
        self.out = out
        name, _, level = codec.partition(":")
        lv = int(level) if level else None
        self.c = None  # type: Any
        self.sync = False
        if name == "gz":
            self.c = zlib.compressobj(6 if lv is None else lv, zlib.DEFLATED, 31)
            self.sync = True
        elif name == "xz":
            import lzma

            self.c = lzma.LZMACompressor(format=lzma.FORMAT_XZ, preset=0 if lv is None else lv)
        elif name == "bz2":
            import bz2

            self.c = bz2.BZ2Compressor(9 if lv is None else lv)
        elif name != "none":
            raise ValueError("unknown codec {!r}".format(codec))
        self.raw_bytes = 0
        self.wire_bytes = 0
        self.done = False

    def _out(self, data: bytes) -> None:
        if data:
            self.wire_bytes += len(data)
            self.out.write(data)

    def write(self, data: Any) -> int:
        n = len(data)
        self.raw_bytes += n
        self._out(self.c.compress(data) if self.c else bytes(data))
        return n

    def flush(self) -> None:
        if self.done:
            return
        if self.sync:
            self._out(self.c.flush(zlib.Z_SYNC_FLUSH))
        self.out.flush()

    def finish(self) -> None:
        if self.c and not self.done:
            self._out(self.c.flush())
        self.done = True
        self.out.flush()


def _stamp(st: os.stat_result) -> Tuple[int, int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


READ_TRIES = 3


def _read_small(it: Item) -> bytes:
    """The file's bytes as of one moment: read again when its size or stamps moved during the
    read (``it.st`` and ``it.mtime`` become that moment's); refused after ``READ_TRIES``."""
    for _ in range(READ_TRIES):
        fd = os.open(str(it.path), os.O_RDONLY | _CLOEXEC)
        try:
            before = os.fstat(fd)
            data = os.read(fd, before.st_size + 1)
            while len(data) <= before.st_size:
                more = os.read(fd, before.st_size + 1 - len(data))
                if not more:
                    break
                data += more
            after = os.fstat(fd)
        finally:
            os.close(fd)
        if _stamp(before) == _stamp(after) and len(data) == before.st_size == it.size:
            it.st, it.mtime = after, after.st_mtime_ns
            return data
        if len(data) > CHUNK or after.st_size > CHUNK:
            break  # grew past a batch entry: the plan no longer fits it
    raise TransferError("{} changed while being sent".format(it.path))


def write_items(out: IO[bytes], items: Iterable[Item], delete: Optional[List[str]] = None,
                on_bytes: Optional[Callable[[int], None]] = None,
                on_hash: Optional[Callable[[Item, str], None]] = None) -> None:
    """Write ``items`` as a verified stream (see the module doc) to ``out``; each file is read
    and hashed once. ``out.flush`` (when there is one) is called after every batch."""
    w = out.write
    flush_out = getattr(out, "flush", None)
    w(MAGIC)
    if delete:
        w(frame(b"X", {"delete": delete}))
    ents = []  # type: List[List[Any]]
    datas = []  # type: List[bytes]
    sent = []  # type: List[Tuple[Item, str]]
    size = 0

    def flush() -> None:
        if not ents:
            return
        w(frame(b"B", ents))
        if datas:
            w(b"".join(datas))
        for it, digest in sent:
            if on_bytes:
                on_bytes(it.size)
            if on_hash:
                on_hash(it, digest)
        del ents[:], datas[:], sent[:]
        if flush_out:
            flush_out()

    for it in items:
        if it.is_dir:
            ents.append(["d", it.arcname, it.mode & 0o7777])
        elif it.link is not None:
            ents.append(["l", it.arcname, it.link])
        elif it.size <= CHUNK and not it.prefix:
            data = _read_small(it)
            digest = small_hash(data)
            ents.append(["f", it.arcname, it.mode & 0o7777, it.mtime, it.size, digest])
            datas.append(data)
            sent.append((it, digest))
            size += it.size
        else:
            flush()
            size = 0
            _write_large(w, it, on_bytes, on_hash)
            continue
        if len(ents) >= BATCH_FILES or size >= BATCH_BYTES:
            flush()
            size = 0
    flush()
    w(frame(b"E", {}))
    if flush_out:
        flush_out()


def _write_large(w: Callable[[bytes], Any], it: Item, on_bytes: Optional[Callable[[int], None]],
                 on_hash: Optional[Callable[[Item, str], None]]) -> None:
    h = Hasher(it.prefix)
    changed = "{} changed while being sent".format(it.path)
    with open(str(it.path), "rb") as f:
        before = os.fstat(f.fileno())
        if before.st_size != it.size:
            raise TransferError(changed)
        it.st, it.mtime = before, before.st_mtime_ns
        w(frame(b"F", {"n": it.arcname, "mode": it.mode & 0o7777, "mtime": it.mtime, "size": it.size, "off": it.offset}))
        left = it.size - it.offset
        f.seek(it.offset)
        while left > 0:
            data = f.read(min(1 << 20, left))
            if not data:
                raise TransferError(changed)
            h.update(data)
            w(data)
            left -= len(data)
            if on_bytes:
                on_bytes(len(data))
        if _stamp(os.fstat(f.fileno())) != _stamp(before):  # a torn read: never verified as sent
            raise TransferError(changed)
    digest = h.hexdigest()
    w(frame(b"V", {"h": digest}))
    if on_hash:
        on_hash(it, digest)


# ---- reading ----------------------------------------------------------------------------
class _Source:
    """Exact reads from a stream, decompressed when it starts with gzip, xz or bz2 magic."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.read1 = getattr(raw, "read1", None) or raw.read
        self.buf = b""
        self.pos = 0
        self.dec = None  # type: Any
        head = b""
        while len(head) < 6:
            more = self.read1(1 << 16)
            if not more:
                break
            head += more
        if head[:2] == b"\x1f\x8b":
            self.dec = zlib.decompressobj(31)
        elif head[:3] == b"BZh":
            import bz2

            self.dec = bz2.BZ2Decompressor()
        elif head[:6] == b"\xfd7zXZ\x00":
            import lzma

            self.dec = lzma.LZMADecompressor()
        self.buf = self._decode(head)
        if self.read(len(MAGIC)) != MAGIC:
            raise TransferError("not a gpujob stream (or an empty one)")

    def _decode(self, data: bytes) -> bytes:
        if self.dec is None or not data:
            return data
        if getattr(self.dec, "eof", False):
            return b""
        try:
            return self.dec.decompress(data)
        except (zlib.error, OSError, EOFError, ValueError) as e:
            raise TransferError("corrupt compressed stream: {}".format(e)) from None

    def read(self, n: int) -> bytes:
        """``n`` bytes, fewer only at the end of the stream."""
        avail = len(self.buf) - self.pos
        if avail >= n:
            out = self.buf[self.pos:self.pos + n]
            self.pos += n
            return out
        pieces = [self.buf[self.pos:]]
        got = avail
        self.buf, self.pos = b"", 0
        while got < n:
            data = self.read1(1 << 16)
            if not data:
                break
            data = self._decode(data)
            if got + len(data) > n:
                take = n - got
                pieces.append(data[:take])
                self.buf = data
                self.pos = take
                got = n
                break
            pieces.append(data)
            got += len(data)
        return b"".join(pieces)

    def record(self) -> Tuple[bytes, Any]:
        raw = self.read(_REC.size)
        if len(raw) < _REC.size:
            raise TransferError("the stream ended early (a cut transfer)")
        kind, n = _REC.unpack(raw)
        if n > MAX_HEAD:
            raise TransferError("corrupt stream: a {}-byte record header".format(n))
        doc = self.read(n)
        if len(doc) < n:
            raise TransferError("the stream ended early (a cut transfer)")
        try:
            return kind, json.loads(doc.decode())
        except ValueError:
            raise TransferError("corrupt stream: a record header is not JSON") from None


def _replace(tmp: str, target: str) -> None:
    try:
        os.replace(tmp, target)
    except OSError:
        if not (os.path.isdir(target) and not os.path.islink(target)):
            raise
        shutil.rmtree(target)  # a folder replaced by a file
        os.replace(tmp, target)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _write_small(tmp: str, target: str, data: Any, mode: int, mtime: int, umask: int) -> os.stat_result:
    """Create ``tmp`` with ``mode`` (never through a link), write ``data``, set the mtime, rename
    onto ``target``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    try:
        fd = os.open(tmp, flags, mode)
    except FileExistsError:  # a leftover of an earlier cut
        _remove(tmp)
        fd = os.open(tmp, flags, mode)
    try:
        view = data
        while len(view):
            view = view[os.write(fd, view):]
        if mode & (umask | 0o7000):
            os.fchmod(fd, mode)
        os.utime(fd, ns=(mtime, mtime))
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    _replace(tmp, target)
    return st


class _Writers:
    """A few threads writing verified small files; ``drain`` waits for all given so far and
    raises the first error."""

    def __init__(self, cache: Optional["HashCache"], on_bytes: Optional[Callable[[int], None]]) -> None:
        self.q = queue.Queue(maxsize=64)  # type: Any
        self.cache, self.on_bytes = cache, on_bytes
        self.threads = []  # type: List[threading.Thread]
        self.errors = []  # type: List[BaseException]
        self.written = 0
        self.nbytes = 0
        self.lock = threading.Lock()
        self.paths = []  # type: List[str]  # the first files written (enough to fsync each)
        self.job = []  # type: List[Tuple[str, str, Any, int, int, str, str]]
        try:
            self.nthreads = max(1, int(os.environ.get("GPUJOB_SYNC_WRITERS", WRITERS)))
        except ValueError:
            self.nthreads = WRITERS
        old = os.umask(0o22)
        os.umask(old)
        self.umask = old

    def put(self, tmp: str, target: str, data: Any, mode: int, mtime: int, digest: str, key: str) -> None:
        self.job.append((tmp, target, data, mode, mtime, digest, key))
        if len(self.job) >= 16:
            self.send()

    def send(self) -> None:
        if not self.job:
            return
        if self.errors:
            raise self.errors[0]
        if len(self.threads) < self.nthreads:
            t = threading.Thread(target=self._run, daemon=True)
            t.start()
            self.threads.append(t)
        job, self.job = self.job, []
        self.q.put(job)

    def _run(self) -> None:
        while True:
            job = self.q.get()
            try:
                if job is None:
                    return
                if self.errors:
                    continue
                n = b = 0
                for tmp, target, data, mode, mtime, digest, key in job:
                    st = _write_small(tmp, target, data, mode, mtime, self.umask)
                    if self.cache is not None:
                        self.cache.set(key, self.cache._key(st) + [digest])
                    n += 1
                    b += len(data)
                with self.lock:
                    if len(self.paths) < FSYNC_EACH:
                        self.paths += [j[1] for j in job]
                    self.written += n
                    self.nbytes += b
                if self.on_bytes:
                    self.on_bytes(b)
            except BaseException as e:  # noqa: BLE001 - handed to the reading thread
                self.errors.append(e)
            finally:
                self.q.task_done()

    def drain(self) -> None:
        self.send()
        self.q.join()
        if self.errors:
            raise self.errors[0]

    def close(self) -> None:
        """Finish what was given (verified files are kept even when the stream broke)."""
        try:
            self.send()
        except BaseException:  # noqa: BLE001 - the first error is raised by the caller's path
            pass
        for _ in self.threads:
            self.q.put(None)
        for t in self.threads:
            t.join()


def durable(path: Path, files: Optional[List[str]] = None) -> None:
    """Make ``files`` (with their folders) durable, or with none given the whole file system
    holding ``path`` (``syncfs``; ``sync`` where it is missing)."""
    if files is not None:
        for p in files + sorted(set(os.path.dirname(f) for f in files)):
            try:
                fd = os.open(p, os.O_RDONLY | _CLOEXEC)
            except OSError:
                continue
            try:
                os.fsync(fd)
            except OSError:
                pass
            finally:
                os.close(fd)
        return
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).syncfs
        fd = os.open(str(path), os.O_RDONLY | _CLOEXEC)
        try:
            if fn(fd) == 0:
                return
        finally:
            os.close(fd)
    except (ImportError, OSError, AttributeError):
        pass
    if hasattr(os, "sync"):
        os.sync()


def delete_paths(base: Path, rels: Iterable[str], cache: Optional["HashCache"] = None,
                 guard: Optional[Guard] = None) -> int:
    """Remove ``rels`` under ``base`` (deepest first); unsafe names (and names through links
    that leave ``base``) are skipped; their hash cache entries go too."""
    g = guard or Guard(base, True)
    n = 0
    for rel in sorted(rels, key=lambda r: -r.count("/")):
        try:
            parent, leaf = g.place(rel)
        except TransferError:
            continue
        target = os.path.join(parent, leaf)
        try:
            if os.path.isdir(target) and not os.path.islink(target):
                os.rmdir(target)
            else:
                os.unlink(target)
            n += 1
        except OSError:
            continue
        if cache is not None:
            cache.drop(os.path.join(str(base), rel))
    return n


def _ints(*vals: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in vals)


def read_items(base: Path, stream: IO[bytes], links_out: bool = True, cache: Optional[HashCache] = None,
               on_bytes: Optional[Callable[[int], None]] = None, sync: bool = True) -> Dict[str, Any]:
    """Apply a stream written by ``write_items`` under ``base``.

    Returns ``{"written", "deleted", "bytes"}`` (bytes = file bytes received). Everything that
    arrived verified is kept on a cut or refused stream (the part file of a large file keeps its
    verified chunks), and the error is raised. With ``sync``, the small files written are made
    durable (an fsync each when they are few, else one ``syncfs``) before the hash cache is saved.
    """
    base.mkdir(parents=True, exist_ok=True)
    res = {"written": 0, "deleted": 0, "bytes": 0}
    guard = Guard(base, links_out)
    writers = _Writers(cache, on_bytes)
    made = set()  # type: set
    base_s = str(base)

    def on_signal(signum: int, frame: Any) -> None:
        raise TransferError("interrupted by signal {}".format(signum))

    old = []
    try:
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
            old.append((sig, signal.signal(sig, on_signal)))
    except (ValueError, OSError, AttributeError):  # not the main thread
        pass
    try:
        src = _Source(stream)
        while True:
            kind, head = src.record()
            if kind == b"E":
                break
            if kind == b"B":
                _batch(src, head, guard, writers, made, base_s, res)
            elif kind == b"F":
                _large(src, head, guard, made, base_s, cache, on_bytes, res)
            elif kind == b"X":
                writers.drain()
                dels = head.get("delete", []) if isinstance(head, dict) else None
                if not isinstance(dels, list) or not all(isinstance(d, str) for d in dels):
                    raise TransferError("corrupt stream: a bad delete record")
                res["deleted"] += delete_paths(base, dels, cache, guard)
                guard.parents.clear()
            else:
                raise TransferError("corrupt stream: unknown record {!r}".format(kind))
        writers.drain()
    finally:
        writers.close()
        guard.recheck()
        res["skipped"] = guard.skipped
        res["written"] += writers.written
        res["bytes"] += writers.nbytes
        for sig, handler in old:
            signal.signal(sig, handler)
        if sync and writers.written:  # a few files: fsync each; many: one syncfs
            durable(base, writers.paths if writers.written <= FSYNC_EACH else None)
        if cache is not None:
            cache.save()
    return res


def _mkparent(parent: str, made: set) -> None:
    if parent not in made:
        os.makedirs(parent, exist_ok=True)
        made.add(parent)


def _batch(src: _Source, ents: Any, guard: Guard, writers: _Writers, made: set, base_s: str,
           res: Dict[str, Any]) -> None:
    if not isinstance(ents, list):
        raise TransferError("corrupt stream: a bad batch record")
    total = 0
    for e in ents:
        if not isinstance(e, list) or not e:
            raise TransferError("corrupt stream: a bad batch entry")
        if e[0] == "f":
            if len(e) != 6 or not _ints(e[2], e[3], e[4]) or e[4] > CHUNK or not isinstance(e[5], str):
                raise TransferError("corrupt stream: a bad file entry {!r}".format(e[:2]))
            total += e[4]
    if total > MAX_BATCH:
        raise TransferError("corrupt stream: a {}-byte batch".format(total))
    payload = src.read(total)
    if len(payload) < total:
        raise TransferError("the stream ended early (a cut transfer)")
    view = memoryview(payload)
    off = 0
    for e in ents:
        kind, name = e[0], e[1]
        if kind == "f":
            size = e[4]
            data = view[off:off + size]
            off += size
            if small_hash(data) != e[5]:
                raise TransferError("{}: content hash mismatch".format(name))
            parent, leaf = guard.place(name)
            _mkparent(parent, made)
            target = parent + "/" + leaf
            writers.put(parent + "/" + tmp_stem(leaf) + PART, target, data, e[2] & 0o7777, e[3], e[5],
                        base_s + "/" + name)
        elif kind == "d":
            if len(e) != 3 or not _ints(e[2]):
                raise TransferError("corrupt stream: a bad folder entry {!r}".format(e[:2]))
            parent, leaf = guard.place(name)
            target = parent + "/" + leaf
            if os.path.islink(target) or (os.path.lexists(target) and not os.path.isdir(target)):
                writers.drain()
                os.unlink(target)
                guard.parents.clear()
            os.makedirs(target, exist_ok=True)
            made.add(target)
        elif kind == "l":
            if len(e) != 3:
                raise TransferError("corrupt stream: a bad link entry {!r}".format(e[:2]))
            parent, leaf = guard.place(name)
            if not guard.link(name, parent, e[2]):
                continue
            writers.drain()  # links change how later names resolve
            _mkparent(parent, made)
            tmp = parent + "/" + tmp_stem(leaf) + PART
            if os.path.lexists(tmp):
                _remove(tmp)
            os.symlink(e[2], tmp)
            _replace(tmp, parent + "/" + leaf)
            guard.parents.clear()
            guard.made.append(parent + "/" + leaf)
            res["written"] += 1
        else:
            raise TransferError("refusing {!r}: not a file, folder or symlink".format(name))


class _Sink:
    """Writes and hashes a large file's pieces in a thread of its own (both release the GIL), so
    reading the stream goes on meanwhile; every ``SIDECAR_EVERY`` chunks the data is synced
    to disk before the sidecar lists it."""

    def __init__(self, fh: Any, h: Hasher, target: Path) -> None:
        self.fh, self.h, self.target = fh, h, target
        self.q = queue.Queue(maxsize=8)  # type: Any
        self.error = None  # type: Optional[BaseException]
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def put(self, data: bytes) -> None:
        if self.error is not None:
            raise self.error
        self.q.put(data)

    def _run(self) -> None:
        since = 0
        datasync = getattr(os, "fdatasync", os.fsync)
        while True:
            data = self.q.get()
            if data is None:
                return
            if self.error is not None:
                continue
            try:
                self.fh.write(data)
                if self.h.update(data):
                    since += 1
                    if since >= SIDECAR_EVERY:
                        self.fh.flush()
                        datasync(self.fh.fileno())
                        _save_sidecar(self.target, self.h.chunks)
                        since = 0
            except BaseException as e:  # noqa: BLE001 - raised in the reading thread
                self.error = e

    def close(self) -> None:
        """Wait for every piece given; raise the first error."""
        self.q.put(None)
        self.t.join()
        if self.error is not None:
            raise self.error


def _large(src: _Source, head: Any, guard: Guard, made: set, base_s: str, cache: Optional[HashCache],
           on_bytes: Optional[Callable[[int], None]], res: Dict[str, Any]) -> None:
    try:
        name, mode, mtime, size, off = head["n"], head["mode"], head["mtime"], head["size"], head["off"]
    except (KeyError, TypeError):
        raise TransferError("corrupt stream: a bad file record") from None
    if not _ints(mode, mtime, size, off) or off % CHUNK or off > size:
        raise TransferError("corrupt stream: a bad file record for {!r}".format(name))
    parent, leaf = guard.place(name)
    _mkparent(parent, made)
    target = Path(parent) / leaf
    tmp = part_path(target)
    chunks = []  # type: List[str]
    if off:
        chunks = part_chunks(target)
        if len(chunks) * CHUNK < off:
            raise TransferError("{}: cannot resume at {} (have {} chunks)".format(name, off, len(chunks)))
        chunks = chunks[:off // CHUNK]
        if os.stat(tmp).st_nlink > 1:  # never write into a hard-linked inode
            shutil.copyfile(tmp, tmp + ".x")
            os.replace(tmp + ".x", tmp)
        fh = open(tmp, "r+b")
        fh.truncate(off)
        fh.seek(off)
    else:
        drop_part(target)
        if os.path.lexists(tmp):
            _remove(tmp)
        fh = open(tmp, "wb")
    h = Hasher(chunks)
    left = size - off
    sink = _Sink(fh, h, target)
    try:
        with fh:
            try:
                while left > 0:
                    data = src.read(min(1 << 20, left))
                    if not data:
                        raise TransferError("the stream ended early (a cut transfer) in {}".format(name))
                    sink.put(data)
                    left -= len(data)
                    res["bytes"] += len(data)
                    if on_bytes:
                        on_bytes(len(data))
            finally:
                sink.close()
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        _save_sidecar(target, h.chunks)
        raise
    _save_sidecar(target, h.chunks)
    kind, doc = src.record()
    if kind != b"V" or not isinstance(doc, dict):
        raise TransferError("{}: no verify record".format(name))
    got = h.hexdigest()
    if doc.get("h") != got:
        drop_part(target)
        raise TransferError("{}: content hash mismatch (sent {}, received {})".format(name, str(doc.get("h"))[:12], got[:12]))
    os.chmod(tmp, mode & 0o7777)
    os.utime(tmp, ns=(mtime, mtime))
    _replace(tmp, str(target))
    drop_part(target)
    if cache is not None:
        cache.put(Path(base_s + "/" + name), got)
    res["written"] += 1


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


def tree(base: Path, cache: Optional[HashCache] = None, hash_all: bool = False) -> Dict[str, Any]:
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
    out = {"files": files, "dirs": dirs, "parts": parts, "exists": True}  # type: Dict[str, Any]
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


def fill_hashes(base: Path, t: Dict[str, Any], cache: HashCache, hash_all: bool = False) -> None:
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
