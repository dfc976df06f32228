"""Applying a stream: records parsed and checked, files verified before they are renamed into
place; everything that arrived verified is kept when the stream is cut or refused."""

import json
import os
import shutil
import signal
import zlib
from pathlib import Path
from typing import IO, Any, Callable, Iterable, List, Optional, Protocol, Tuple, TypedDict

from .durable import NOFOLLOW, durable, remove, replace
from .format import CHUNK, MAGIC, MAX_BATCH, MAX_HEAD, REC, TransferError, raise_on_signals
from .guard import Guard
from .hashing import HashCache, Hasher, small_hash
from .parts import PART, drop_part, part_chunks, part_path, range_sidecars, save_sidecar, tmp_stem
from .writers import FSYNC_EACH, Sink, Writers

OUT_MAX = 1 << 20  # bytes one decompression step may give (a 208-byte bz2 bomb is 256 MiB of zeros)
RAW_READ = 1 << 20  # bytes one read of the stream takes at most: what has arrived, in one piece


class Readable(Protocol):
    """What a stream is read from: a file, a pipe, or one with bytes put back (its ``read1`` used where it has one)."""

    def read(self, __n: int = -1) -> bytes: ...


class _Source:
    """Exact reads from a stream, decompressed when it starts with gzip, xz or bz2 magic, at most
    ``OUT_MAX`` bytes a step: what is held is what a read asked for, whatever the ratio."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.read1 = getattr(raw, "read1", None) or raw.read
        self.buf = b""
        self.pos = 0
        self.dec = None  # type: Any
        self.head = b""
        while len(self.head) < 6:
            more = self.read1(1 << 16)
            if not more:
                break
            self.head += more
        if self.head[:2] == b"\x1f\x8b":
            self.dec = zlib.decompressobj(31)
        elif self.head[:3] == b"BZh":
            import bz2

            self.dec = bz2.BZ2Decompressor()
        elif self.head[:6] == b"\xfd7zXZ\x00":
            import lzma

            self.dec = lzma.LZMADecompressor()
        if self.read(len(MAGIC)) != MAGIC:
            raise TransferError("not a gpujob stream (or an empty one)")

    def _raw(self) -> bytes:
        if self.head:
            data, self.head = self.head, b""
            return data
        return self.read1(RAW_READ)

    def _more(self) -> bytes:
        """The stream's next bytes (b"" at its end): at most ``OUT_MAX`` decompressed ones."""
        if self.dec is None:
            return self._raw()
        zlib_tail = hasattr(self.dec, "unconsumed_tail")  # zlib keeps what it did not take; bz2 and xz hold it
        while not getattr(self.dec, "eof", False):
            if zlib_tail:
                data = self.dec.unconsumed_tail or self._raw()
            else:
                data = self._raw() if self.dec.needs_input else b""
            if not data and not zlib_tail and self.dec.needs_input:
                return b""
            try:
                out = self.dec.decompress(data, OUT_MAX)  # with no input: what it still holds
            except (zlib.error, OSError, EOFError, ValueError) as e:
                raise TransferError("corrupt compressed stream: {}".format(e)) from None
            if out or not data:
                return out
        return b""

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
            data = self._more()
            if not data:
                break
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

    def read_parts(self, n: int) -> List[Any]:
        """``n`` bytes as the pieces they arrived in (fewer only at the end of the stream): what
        ``read`` gives, without joining them (a large file's pieces go to its writer as they are)."""
        parts = []  # type: List[Any]
        got = 0
        if n <= 0:
            return parts
        if self.pos < len(self.buf):
            data, start = self.buf, self.pos
            self.buf, self.pos = b"", 0
        else:
            data, start = self._more(), 0
        while data and got < n:
            end = min(len(data), start + n - got)
            parts.append(memoryview(data)[start:end] if start or end < len(data) else data)
            got += end - start
            if end < len(data):  # the rest is read next
                self.buf, self.pos = data, end
                break
            if got < n:
                data, start = self._more(), 0
        return parts

    def record(self) -> Tuple[bytes, Any]:
        raw = self.read(REC.size)
        if len(raw) < REC.size:
            raise TransferError("the stream ended early (a cut transfer)")
        kind, n = REC.unpack(raw)
        if n > MAX_HEAD:
            raise TransferError("corrupt stream: a {}-byte record header".format(n))
        doc = self.read(n)
        if len(doc) < n:
            raise TransferError("the stream ended early (a cut transfer)")
        try:
            return kind, json.loads(doc.decode())
        except ValueError:
            raise TransferError("corrupt stream: a record header is not JSON") from None


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


class Received(TypedDict, total=False):
    """``read_items``' answer: files written, paths deleted, file bytes received; links not kept
    (``skipped``: "name -> target") and files a running job held (``held``), where any."""
    written: int
    deleted: int
    bytes: int
    skipped: List[str]
    held: List[str]


def read_items(base: Path, stream: Readable, links_out: bool = True, cache: Optional[HashCache] = None,
               on_bytes: Optional[Callable[[int], None]] = None, sync: bool = True,
               modes: int = 0o7777, plain: bool = False) -> "Received":
    """Apply a stream written by ``write_items`` under ``base``.

    Returns ``{"written", "deleted", "bytes"}`` (bytes = file bytes received). Everything that
    arrived verified is kept on a cut or refused stream (the part file of a large file keeps its
    verified chunks), and the error is raised. With ``sync``, the small files written are made
    durable (an fsync each when they are few, else one ``syncfs``) before the hash cache is saved.
    ``modes``: the mode bits a file may get (a pull's 0o777: a host never plants a setuid file here);
    ``plain``: a name with a control character is refused (a pull's: the names land on the user's machine).
    """
    base.mkdir(parents=True, exist_ok=True)
    res = {"written": 0, "deleted": 0, "bytes": 0}  # type: Received
    guard = Guard(base, links_out, plain)
    writers = Writers(cache, on_bytes)
    made = set()  # type: set
    base_s = str(base)

    old = raise_on_signals()
    try:
        src = _Source(stream)
        while True:
            kind, head = src.record()
            if kind == b"E":
                if isinstance(head, dict) and isinstance(head.get("held"), list):
                    res.setdefault("held", []).extend(str(x) for x in head["held"])
                break
            if kind == b"B":
                _batch(src, head, guard, writers, made, base_s, res, modes)
            elif kind == b"F":
                _large(src, head, guard, made, base_s, cache, on_bytes, res, modes)
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
        if "held" in res:
            res["held"] = sorted(set(res["held"]))
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


def _batch(src: _Source, ents: Any, guard: Guard, writers: Writers, made: set, base_s: str,
           res: "Received", modes: int = 0o7777) -> None:
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
            writers.put(parent + "/" + tmp_stem(leaf) + PART, target, data, e[2] & modes, e[3], e[5],
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
                remove(tmp)
            os.symlink(e[2], tmp)
            replace(tmp, parent + "/" + leaf)
            guard.parents.clear()
            guard.made.append(parent + "/" + leaf)
            res["written"] += 1
        else:
            raise TransferError("refusing {!r}: not a file, folder or symlink".format(name))



def _large(src: _Source, head: Any, guard: Guard, made: set, base_s: str, cache: Optional[HashCache],
           on_bytes: Optional[Callable[[int], None]], res: "Received", modes: int = 0o7777) -> None:
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
        for stale in range_sidecars(target):  # a ranged upload's, now written over
            remove(stale)
        if os.stat(tmp).st_nlink > 1:  # never write into a hard-linked inode
            shutil.copyfile(tmp, tmp + ".x")
            os.replace(tmp + ".x", tmp)
        fh: IO[bytes] = os.fdopen(os.open(tmp, os.O_RDWR | NOFOLLOW), "r+b")  # never through a link
        fh.truncate(off)
        fh.seek(off)
    else:
        drop_part(target)
        if os.path.lexists(tmp):
            remove(tmp)
        fh = open(tmp, "wb")
    h = Hasher(chunks)
    left = size - off
    sink = Sink(fh, h, target)
    try:
        with fh:
            try:
                while left > 0:
                    parts = src.read_parts(min(1 << 20, left))
                    got = sum(len(p) for p in parts)
                    if not got:
                        raise TransferError("the stream ended early (a cut transfer) in {}".format(name))
                    sink.put(parts)
                    left -= got
                    res["bytes"] += got
                    if on_bytes:
                        on_bytes(got)
            finally:
                sink.close()
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        save_sidecar(target, h.chunks)
        raise
    save_sidecar(target, h.chunks)
    kind, doc = src.record()
    if kind != b"V" or not isinstance(doc, dict):
        raise TransferError("{}: no verify record".format(name))
    if doc.get("changed") is True:  # the sender saw it change while reading: not this file's content
        drop_part(target)
        remove(tmp)
        res.setdefault("held", []).append(name)
        return
    digest = h.hexdigest()
    if doc.get("h") != digest:
        drop_part(target)
        raise TransferError("{}: content hash mismatch (sent {}, received {})".format(name, str(doc.get("h"))[:12], digest[:12]))
    os.chmod(tmp, mode & modes)
    os.utime(tmp, ns=(mtime, mtime))
    replace(tmp, str(target))
    drop_part(target)
    if cache is not None:
        cache.put(Path(base_s + "/" + name), digest)
    res["written"] += 1
