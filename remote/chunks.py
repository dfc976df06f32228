"""Verified, resumable file streams shared by both ends (upload receive, pull extract).

Standard library only, Python 3.8+, no imports from the rest of ``remote`` (the laptop loads
this file by path). The wire format is a PAX tar stream, optionally gzip/xz/bz2 compressed
(the reader auto-detects):

- small files (at most one chunk) come in batches: a ``.gpujob-hashes.json`` member maps each
  name of the batch to its content hash, then the files follow as plain ustar members (a PAX
  header per file cost more than everything else on a tree of small files); the hash may
  also come in a file's own PAX header ``GPUJOB.h`` (the older form, still read);
- a larger file is followed by a ``.gpujob-verify`` member holding its hash, and may start at
  ``GPUJOB.off`` (a whole number of chunks) to resume a part file;
- ``.gpujob-sync.json`` lists deletions.

A file is received as ``<name>.gpujob-part`` and renamed into place only after its hash
checks out, so it is never visible half-written under its final name (and the rename gives a
new inode, so hard-linked job snapshots keep their old content). The part file of a large
file keeps its verified prefix; ``<name>.gpujob-part.json`` lists the prefix's chunk hashes so
a cut transfer resumes where it stopped.

Content hash: sha256 over the concatenated sha256 digests of 4 MiB chunks (one empty chunk
for an empty file), so a resumed file is verified without rereading its prefix.
"""

import hashlib
import io
import json
import os
import shutil
import signal
import stat
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable, Dict, Iterable, List, Optional, Tuple

CHUNK = 4 << 20
PART = ".gpujob-part"
SIDECAR = PART + ".json"
VERIFY = ".gpujob-verify"
CONTROL = ".gpujob-sync.json"
HASHES = ".gpujob-hashes.json"
BATCH_FILES = 512  # small files per hashes member
BATCH_BYTES = 16 << 20
K_OFF = "GPUJOB.off"
K_HASH = "GPUJOB.h"
SIDECAR_EVERY = 4  # chunks between sidecar writes


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
    """Content hashes by absolute path, valid while (size, mtime_ns, inode) stay the same."""

    def __init__(self, path: Optional[Path]) -> None:
        self.path = path
        self.data = {}  # type: Dict[str, List[Any]]
        self.dirty = False
        if path is not None:
            try:
                with open(str(path)) as f:
                    self.data = json.load(f)
            except (OSError, ValueError):
                self.data = {}

    @staticmethod
    def _key(st: os.stat_result) -> List[Any]:
        return [st.st_size, st.st_mtime_ns, st.st_ino]

    def get(self, path: Path, st: os.stat_result) -> Optional[str]:
        rec = self.data.get(str(path))
        return rec[3] if rec and rec[:3] == self._key(st) else None

    def put(self, path: Path, h: str, st: Optional[os.stat_result] = None) -> None:
        st = st or os.stat(str(path))
        self.data[str(path)] = self._key(st) + [h]
        self.dirty = True

    def hash(self, path: Path, st: Optional[os.stat_result] = None) -> str:
        st = st or os.stat(str(path))
        h = self.get(path, st)
        if h is None:
            h = file_hash(path).hexdigest()
            self.put(path, h, st)
        return h

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(".{}.{}.tmp".format(self.path.name, os.getpid()))
        with open(str(tmp), "w") as f:
            json.dump(self.data, f)
        os.replace(str(tmp), str(self.path))
        self.dirty = False


# ---- part files -------------------------------------------------------------------------
def part_chunks(target: Path) -> List[str]:
    """The verified chunk hashes of ``target``'s part file (empty when there is none)."""
    side = target.with_name(target.name + SIDECAR)
    part = target.with_name(target.name + PART)
    try:
        with open(str(side)) as f:
            chunks = list(json.load(f).get("chunks", []))
        if os.path.getsize(str(part)) >= len(chunks) * CHUNK:
            return chunks
    except (OSError, ValueError, AttributeError):
        pass
    return []


def _save_sidecar(target: Path, chunks: List[str]) -> None:
    side = target.with_name(target.name + SIDECAR)
    tmp = side.with_name(side.name + ".tmp")
    with open(str(tmp), "w") as f:
        json.dump({"chunks": chunks, "chunk": CHUNK}, f)
    os.replace(str(tmp), str(side))


def drop_part(target: Path) -> None:
    for suffix in (PART, SIDECAR):
        try:
            os.unlink(str(target.with_name(target.name + suffix)))
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
def safe_target(base: Path, m: tarfile.TarInfo, links_out: bool, seen: Optional[Dict[str, Path]] = None) -> Path:
    """Where member ``m`` lands under ``base``; refuses absolute names, ``..``, paths through
    symlinks that leave ``base``, devices, hard links, and (unless ``links_out``) symlinks that
    point outside ``base``."""
    name = PurePosixPath(m.name)
    if not m.name or name.is_absolute() or ".." in name.parts:
        raise TransferError("refusing {!r}: it would land outside {}".format(m.name, base))
    target = base.joinpath(*name.parts)
    if seen is None:
        seen = {}
    root = seen.get("") or base.resolve()
    seen[""] = root
    key = str(target.parent)
    parent = seen.get(key) or target.parent.resolve()
    if parent != root and root not in parent.parents:
        raise TransferError("refusing {!r}: a symlink on its way points outside {}".format(m.name, base))
    if not (m.isfile() or m.isdir() or m.issym()):
        raise TransferError("refusing {!r}: not a file, folder or symlink".format(m.name))
    if m.issym() and not links_out:
        link = PurePosixPath(m.linkname)
        bad = link.is_absolute() or not link.parts
        if not bad:
            resolved = Path(os.path.normpath(str(parent.joinpath(*link.parts))))
            bad = resolved != root and root not in resolved.parents
        if bad:
            raise TransferError("refusing link {!r} -> {!r}: it points outside {}".format(m.name, m.linkname, base))
    if m.issym():
        seen.clear()  # a new link may change how later paths resolve
    else:
        seen[key] = parent
    return parent / target.name


# ---- writing ----------------------------------------------------------------------------
class Item:
    """One thing to send: ``arcname`` on the wire, ``path`` here, resumed from ``prefix`` chunks."""

    __slots__ = ("arcname", "path", "size", "mtime", "mode", "link", "is_dir", "prefix")

    def __init__(self, arcname: str, path: Path, size: int = 0, mtime: int = 0, mode: int = 0o644,
                 link: Optional[str] = None, is_dir: bool = False, prefix: Optional[List[str]] = None) -> None:
        self.arcname, self.path, self.size, self.mtime, self.mode = arcname, path, size, mtime, mode
        self.link, self.is_dir, self.prefix = link, is_dir, list(prefix or [])

    @property
    def offset(self) -> int:
        return len(self.prefix) * CHUNK


class _Reader(io.RawIOBase):
    def __init__(self, f: IO[bytes], h: Hasher, cb: Optional[Callable[[int], None]]) -> None:
        self.f, self.h, self.cb = f, h, cb

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.h.update(data)
        if self.cb:
            self.cb(len(data))
        return data


class Compressed(io.RawIOBase):
    """A write-only wrapper compressing into ``out``: codec ``none``, ``gz:L``, ``xz:L`` or ``bz2:L``."""

    def __init__(self, out: IO[bytes], codec: str) -> None:
        self.out = out
        name, _, level = codec.partition(":")
        lv = int(level) if level else None
        self.c = None  # type: Any
        if name == "gz":
            self.c = zlib.compressobj(6 if lv is None else lv, zlib.DEFLATED, 31)
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

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = len(data)
        self.raw_bytes += n
        out = self.c.compress(bytes(data)) if self.c else bytes(data)
        if out:
            self.wire_bytes += len(out)
            self.out.write(out)
        return n

    def finish(self) -> None:
        if self.c:
            tail = self.c.flush()
            self.wire_bytes += len(tail)
            self.out.write(tail)
        self.out.flush()


def write_items(out: IO[bytes], items: Iterable[Item], delete: Optional[List[str]] = None,
                on_bytes: Optional[Callable[[int], None]] = None,
                on_hash: Optional[Callable[[Item, str], None]] = None,
                read_base: Optional[Path] = None) -> None:
    """Write ``items`` as a verified tar stream (see the module doc) to ``out``."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        if delete:
            data = json.dumps({"delete": delete}).encode()
            info = tarfile.TarInfo(CONTROL)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        batch: List[Tuple[Item, bytes, str]] = []

        def flush() -> None:
            if not batch:
                return
            doc = json.dumps({it.arcname: digest for it, _, digest in batch}).encode()
            hinfo = tarfile.TarInfo(HASHES)
            hinfo.size = len(doc)
            tar.addfile(hinfo, io.BytesIO(doc))
            for it, data, digest in batch:
                info = tarfile.TarInfo(it.arcname)
                info.mode, info.mtime, info.size = it.mode & 0o7777, it.mtime, len(data)
                tar.addfile(info, io.BytesIO(data))
                if on_bytes:
                    on_bytes(it.size)
                if on_hash:
                    on_hash(it, digest)
            del batch[:]

        size = 0
        for it in items:
            if it.link is None and not it.is_dir and it.size <= CHUNK and not it.prefix:
                with open(str(it.path), "rb") as f:
                    data = f.read(it.size + 1)
                if len(data) != it.size:
                    raise TransferError("{} changed while being sent".format(it.path))
                h = Hasher()
                h.update(data)
                batch.append((it, data, h.hexdigest()))
                size += len(data)
                if len(batch) >= BATCH_FILES or size >= BATCH_BYTES:
                    flush()
                    size = 0
                continue
            flush()
            size = 0
            info = tarfile.TarInfo(it.arcname)
            info.mode, info.mtime = it.mode & 0o7777, it.mtime
            if it.link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, it.link
                tar.addfile(info)
                continue
            if it.is_dir:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                continue
            h = Hasher(it.prefix)
            info.size = it.size - it.offset
            info.pax_headers = {K_OFF: str(it.offset)}
            with open(str(it.path), "rb") as f:
                f.seek(it.offset)
                tar.addfile(info, _Reader(f, h, on_bytes))  # type: ignore[arg-type]
            digest = h.hexdigest()
            data = json.dumps({"h": digest}).encode()
            v = tarfile.TarInfo(VERIFY)
            v.size = len(data)
            tar.addfile(v, io.BytesIO(data))
            if on_hash:
                on_hash(it, digest)
        flush()


# ---- reading ----------------------------------------------------------------------------
class _Pending:
    def __init__(self, target: Path, tmp: Path, h: Hasher, m: tarfile.TarInfo, big: bool) -> None:
        self.target, self.tmp, self.h, self.m, self.big = target, tmp, h, m, big


def _replace(tmp: Path, target: Path) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(str(target))
    os.replace(str(tmp), str(target))


def _write_small(tmp: Path, target: Path, data: bytes, m: tarfile.TarInfo) -> os.stat_result:
    """Write ``data`` to ``tmp`` (never through a link), set mode and mtime, rename onto ``target``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(str(tmp), flags, 0o600)
    except OSError:
        os.unlink(str(tmp))
        fd = os.open(str(tmp), flags, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, m.mode & 0o7777)
        os.utime(fd, (m.mtime, m.mtime))
        st = os.fstat(fd)
    finally:
        os.close(fd)
    try:
        os.replace(str(tmp), str(target))
    except IsADirectoryError:
        _replace(tmp, target)
    return st


def delete_paths(base: Path, rels: Iterable[str]) -> int:
    """Remove ``rels`` under ``base`` (deepest first); unsafe names are skipped."""
    n = 0
    for rel in sorted(rels, key=lambda r: -r.count("/")):
        p = PurePosixPath(rel)
        if p.is_absolute() or ".." in p.parts or not p.parts:
            continue
        target = base.joinpath(*p.parts)
        try:
            if target.is_dir() and not target.is_symlink():
                os.rmdir(str(target))
            else:
                os.unlink(str(target))
            n += 1
        except OSError:
            pass
    return n


def read_items(base: Path, stream: IO[bytes], links_out: bool = True, cache: Optional[HashCache] = None,
               on_bytes: Optional[Callable[[int], None]] = None) -> Dict[str, Any]:
    """Apply a stream written by ``write_items`` under ``base``.

    Returns ``{"written", "deleted", "bytes"}`` (bytes = file bytes received). On a cut stream
    the part file of the file in flight keeps its verified chunks, and the error is raised.
    """
    base.mkdir(parents=True, exist_ok=True)
    res = {"written": 0, "deleted": 0, "bytes": 0}
    pending = None  # type: Optional[_Pending]

    def finish(p: _Pending, expected: str) -> None:
        got = p.h.hexdigest()
        if got != expected:
            drop_part(p.target)
            raise TransferError("{}: content hash mismatch (sent {}, received {})".format(p.m.name, expected[:12], got[:12]))
        os.chmod(str(p.tmp), p.m.mode & 0o7777)
        os.utime(str(p.tmp), (p.m.mtime, p.m.mtime))
        _replace(p.tmp, p.target)
        if p.big:
            drop_part(p.target)
        if cache is not None:
            cache.put(p.target, got)
        res["written"] += 1

    def on_signal(signum: int, frame: Any) -> None:
        raise TransferError("interrupted by signal {}".format(signum))

    old = []
    try:
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
            old.append((sig, signal.signal(sig, on_signal)))
    except (ValueError, OSError, AttributeError):  # not the main thread
        pass
    current = None  # type: Optional[_Pending]
    seen = {}  # type: Dict[str, Path]
    made = set()  # type: set
    expect = {}  # type: Dict[str, str]
    try:
        with tarfile.open(fileobj=stream, mode="r|*") as tar:
            for m in tar:
                if m.name == VERIFY:
                    f = tar.extractfile(m)
                    doc = json.loads(f.read().decode()) if f else {}
                    if pending is None:
                        raise TransferError("verify record without a file")
                    finish(pending, doc.get("h", ""))
                    pending = None
                    continue
                if pending is not None:
                    raise TransferError("{}: no verify record".format(pending.m.name))
                if m.name == CONTROL:
                    f = tar.extractfile(m)
                    ctl = json.loads(f.read().decode()) if f else {}
                    res["deleted"] += delete_paths(base, ctl.get("delete", []))
                    continue
                if m.name == HASHES:
                    f = tar.extractfile(m)
                    expect = json.loads(f.read().decode()) if f else {}
                    continue
                target = safe_target(base, m, links_out, seen)
                if m.isdir():
                    if target.is_symlink() or (target.exists() and not target.is_dir()):
                        os.unlink(str(target))
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if target.parent not in made:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    made.add(target.parent)
                tmp = target.with_name(target.name + PART)
                if m.issym():
                    if os.path.lexists(str(tmp)):
                        os.unlink(str(tmp))
                    os.symlink(m.linkname, str(tmp))
                    _replace(tmp, target)
                    res["written"] += 1
                    continue
                digest = m.pax_headers.get(K_HASH) or expect.pop(m.name, None)
                if digest is not None and m.size <= CHUNK:  # small: verify in memory, then one write
                    src = tar.extractfile(m)
                    data = src.read() if src else b""
                    h = Hasher()
                    h.update(data)
                    if h.hexdigest() != digest or len(data) != m.size:
                        raise TransferError("{}: content hash mismatch".format(m.name))
                    st = _write_small(tmp, target, data, m)
                    if cache is not None:
                        cache.put(target, digest, st)
                    res["bytes"] += len(data)
                    res["written"] += 1
                    if on_bytes:
                        on_bytes(len(data))
                    continue
                off = int(m.pax_headers.get(K_OFF, "0"))
                big = K_HASH not in m.pax_headers
                chunks = []  # type: List[str]
                if off:
                    chunks = part_chunks(target)
                    if len(chunks) * CHUNK < off or off % CHUNK:
                        raise TransferError("{}: cannot resume at {} (have {} chunks)".format(m.name, off, len(chunks)))
                    chunks = chunks[:off // CHUNK]
                    if os.stat(str(tmp)).st_nlink > 1:  # never write into a hard-linked inode
                        shutil.copyfile(str(tmp), str(tmp) + ".x")
                        os.replace(str(tmp) + ".x", str(tmp))
                    fh = open(str(tmp), "r+b")
                    fh.truncate(off)
                    fh.seek(off)
                else:
                    if big:
                        drop_part(target)
                    if os.path.lexists(str(tmp)):
                        os.unlink(str(tmp))
                    fh = open(str(tmp), "wb")
                h = Hasher(chunks)
                current = _Pending(target, tmp, h, m, big)
                src = tar.extractfile(m)
                assert src is not None
                since = 0
                with fh:
                    while True:
                        data = src.read(1 << 20)
                        if not data:
                            break
                        fh.write(data)
                        res["bytes"] += len(data)
                        if on_bytes:
                            on_bytes(len(data))
                        if big and h.update(data):
                            since += 1
                            if since >= SIDECAR_EVERY:
                                fh.flush()
                                _save_sidecar(target, h.chunks)
                                since = 0
                        elif not big:
                            h.update(data)
                    fh.flush()
                    if big:  # small files: the rename alone keeps readers safe; fsync costs too much per file
                        os.fsync(fh.fileno())
                current = None
                if big:
                    _save_sidecar(target, h.chunks)
                    pending = _Pending(target, tmp, h, m, big)
                else:
                    finish(_Pending(target, tmp, h, m, big), m.pax_headers[K_HASH])
        if pending is not None:
            raise TransferError("{}: stream ended before its verify record".format(pending.m.name))
    except BaseException:
        if current is not None and current.big:
            _save_sidecar(current.target, current.h.chunks)
        raise
    finally:
        for sig, handler in old:
            signal.signal(sig, handler)
        if cache is not None:
            cache.save()
    return res


def tree(base: Path, cache: Optional[HashCache] = None, hash_all: bool = False,
         skip: Callable[[str], bool] = lambda rel: False) -> Dict[str, Any]:
    """``{"files": {rel: [size, mtime_s, mode, link, hash]}, "dirs": [...], "parts": {rel: chunks}}``.

    ``hash`` comes from ``cache`` (computed on a miss when ``hash_all``), else None.
    """
    files = {}  # type: Dict[str, List[Any]]
    dirs = []  # type: List[str]
    parts = {}  # type: Dict[str, List[str]]

    def one(full: str, rel: str) -> None:
        try:
            st = os.lstat(full)
        except OSError:
            return
        if stat.S_ISLNK(st.st_mode):
            files[rel] = [0, 0, 0o777, os.readlink(full), None]
        elif stat.S_ISDIR(st.st_mode):
            dirs.append(rel)
        elif stat.S_ISREG(st.st_mode):
            name = os.path.basename(rel)
            if name.endswith(SIDECAR) or name.endswith(SIDECAR + ".tmp"):
                return
            if name.endswith(PART):
                final = rel[: -len(PART)]
                ch = part_chunks(Path(full[: -len(PART)]))
                if ch:
                    parts[final] = ch
                return
            h = None
            if cache is not None:
                h = cache.hash(Path(full), st) if hash_all else cache.get(Path(full), st)
            files[rel] = [st.st_size, int(st.st_mtime), stat.S_IMODE(st.st_mode), None, h]

    if base.is_symlink() or base.is_file():
        one(str(base), "")
        return {"files": files, "dirs": dirs, "parts": parts, "exists": True}
    if not base.is_dir():
        ch = part_chunks(base)  # a single-file entry's part file sits beside it
        if ch:
            parts[""] = ch
        return {"files": files, "dirs": dirs, "parts": parts, "exists": False}
    for dirpath, dirnames, filenames in os.walk(str(base)):
        rel_dir = os.path.relpath(dirpath, str(base))
        for name in sorted(dirnames) + sorted(filenames):
            rel = name if rel_dir == "." else rel_dir + "/" + name
            if skip(rel):
                continue
            one(os.path.join(dirpath, name), rel)
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))
                       and not skip(d if rel_dir == "." else rel_dir + "/" + d)]
    return {"files": files, "dirs": dirs, "parts": parts, "exists": True}
