"""A large file over several channels at once: byte ranges written into one part file.

sshd advertises a fixed 2 MB window per session channel, so one channel moves 2 MB per round
trip (13 MB/s at 150 ms). The laptop opens several ``range`` commands, each carrying some
ranges of the same file into the same part file (``parts.part_path``). The layout is fixed by
the file's size and ``span`` (chunks per range), so a later try finds the same ranges again:
range ``k`` holds chunks ``k*span .. (k+1)*span-1`` and has a sidecar of its own
(``parts.range_sidecar``) listing the verified hashes of its leading chunks, synced after the
data it vouches for.

A channel: the command writes one line ``{"have": {k: [chunk hashes]}}`` for its ranges, then
reads ``RMAGIC`` and records (``format.frame``): ``R`` ``{"k", "off"}`` starts range ``k`` at
its chunk ``off`` (at most what it has), ``C`` ``{"h"}`` announces the next chunk's sha256 and
is followed by its bytes (refused when they do not hash to it: nothing after the last verified
chunk is vouched for), ``E`` ends. It answers ``{"done": ...}``; the laptop then sends the one
channel it keeps a ``V`` record ``{"h", "mode", "mtime"}`` once every channel is done, and that
command commits: the whole-file hash from the ranges' sidecars must equal ``h`` (the content
hash of ``hashing``), then the part file is cut to size, fsynced and renamed into place. A cut
transfer leaves the part file and its range sidecars, never a file under the final name.

``serve`` (one process per sync serving every channel over TCP): ``rangeserve``.
"""

import contextlib
import hashlib
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import IO, Any, Callable, ContextManager, Dict, Iterator, List, Optional

from remote.core import filelock
from remote.core.jsontypes import JSONObject

from .durable import CLOEXEC, NOFOLLOW, durable, replace
from .format import CHUNK, REC, TransferError, raise_on_signals
from .guard import Guard
from .hashing import HashCache
from .parts import SIDECAR_EVERY, drop_part, part_path, range_sidecar, sidecar_path

RMAGIC = b"GJR1"
MAX_RANGES = 1 << 20


def layout(size: int, span: int) -> int:
    """How many ranges a file of ``size`` bytes has with ``span`` chunks each."""
    chunks = max(1, -(-size // CHUNK))
    return -(-chunks // span)


def range_chunks(size: int, span: int, k: int) -> int:
    """How many chunks range ``k`` holds."""
    chunks = max(1, -(-size // CHUNK))
    return max(0, min(span, chunks - k * span))


def read_range(target: Any, size: int, span: int, k: int) -> List[str]:
    """The verified chunk hashes of range ``k`` (empty when its sidecar is missing or describes
    another layout or file size)."""
    try:
        with open(range_sidecar(target, k)) as f:
            doc = json.load(f)
        if doc.get("name") == Path(target).name and doc.get("size") == size and doc.get("span") == span \
                and doc.get("chunk") == CHUNK:
            chunks = [c for c in doc.get("chunks", []) if isinstance(c, str)]
            return chunks[:range_chunks(size, span, k)]
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    return []


def held(target: Any, size: int, span: int, ks: List[int]) -> Dict[int, List[str]]:
    """What the instance holds verified of ranges ``ks`` of ``target``."""
    return {k: read_range(target, size, span, k) for k in ks}


def held_files(base: Path, files: Any) -> Dict[str, Dict[str, List[str]]]:
    """For ``serve``'s first line: every range held of each ``[name, size, span]`` the laptop
    announced (a name that is not a safe path under ``base`` is left out)."""
    out = {}  # type: Dict[str, Dict[str, List[str]]]
    for f in files if isinstance(files, list) else []:
        try:
            name, size, span = f
            parent, leaf = Guard(base, True).place(name)
            have = held(parent + "/" + leaf, size, span, list(range(layout(size, span))))
        except (TypeError, ValueError, AttributeError, TransferError, OSError):
            continue
        out[name] = {str(k): v for k, v in have.items()}
    return out


def save_range(target: Any, size: int, span: int, k: int, chunks: List[str]) -> None:
    side = range_sidecar(target, k)
    with open(side + ".tmp", "w") as f:
        json.dump({"name": Path(target).name, "size": size, "span": span, "chunk": CHUNK, "chunks": chunks}, f)
    os.replace(side + ".tmp", side)


class _Exact:
    """Exact reads from a byte stream."""

    def __init__(self, raw: Any) -> None:
        self.read1 = getattr(raw, "read1", None) or raw.read

    def read(self, n: int) -> bytes:
        parts = []
        got = 0
        while got < n:
            data = self.read1(min(n - got, 1 << 20))
            if not data:
                break
            parts.append(data)
            got += len(data)
        return b"".join(parts)

    def record(self) -> Any:
        raw = self.read(REC.size)
        if len(raw) < REC.size:
            raise TransferError("the stream ended early (a cut transfer)")
        kind, n = REC.unpack(raw)
        if n > 4096:
            raise TransferError("corrupt range stream: a {}-byte record header".format(n))
        doc = self.read(n)
        try:
            head = json.loads(doc.decode())
        except ValueError:
            raise TransferError("corrupt range stream: a record header is not JSON") from None
        if not isinstance(head, dict):
            raise TransferError("corrupt range stream: a bad record")
        return kind, head


def _open_part(tmp: str, parent: str) -> int:
    """The part file for writing, shared by the channels; a hard-linked one (a job snapshot's)
    is copied first, under a lock on the folder so only one channel does it."""
    dfd = os.open(parent, os.O_RDONLY | CLOEXEC)
    try:
        filelock.lock(dfd)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | NOFOLLOW | CLOEXEC, 0o600)
        if os.fstat(fd).st_nlink > 1:
            os.close(fd)
            shutil.copyfile(tmp, tmp + ".x")
            os.replace(tmp + ".x", tmp)
            fd = os.open(tmp, os.O_RDWR | NOFOLLOW | CLOEXEC)
        return fd
    finally:
        os.close(dfd)  # closing releases the lock


def receive_ranges(base: Path, name: str, size: int, span: int, ks: List[int], stdin: IO[bytes],
                   stdout: IO[bytes], cache: Optional[HashCache] = None,
                   hold: Optional[Callable[[], ContextManager[Any]]] = None) -> JSONObject:
    """One channel of a ranged upload of ``name`` under ``base`` (see the module doc). The
    channel may be opened before the laptop knows it needs it (an empty stream then ends it);
    ``hold`` (the project's sync lease) is taken once its stream starts."""
    if not isinstance(size, int) or size < 1 or not 0 < span <= 4096:
        raise TransferError("a ranged upload needs a size and a span of 1..4096 chunks")
    nr = layout(size, span)
    if not ks or any(not 0 <= k < nr for k in ks) or len(ks) > MAX_RANGES:
        raise TransferError("range outside {} (it has {} ranges)".format(name, nr))
    parent, leaf = Guard(base, True).place(name)
    os.makedirs(parent, exist_ok=True)
    target = parent + "/" + leaf
    have = held(target, size, span, ks)
    stdout.write((json.dumps({"have": {str(k): v for k, v in have.items()}}) + "\n").encode())
    stdout.flush()
    src = _Exact(stdin)
    magic = src.read(len(RMAGIC))
    if not magic:  # opened ahead of the laptop's plan, then not needed
        return {"bytes": 0, "committed": False}
    if magic != RMAGIC:
        raise TransferError("not a gpujob range stream")
    with hold() if hold is not None else _nothing():
        return _receive(src, base, name, size, span, target, parent, have, stdout, cache)


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


def _receive(src: _Exact, base: Path, name: str, size: int, span: int, target: str, parent: str,
             have: Dict[int, List[str]], stdout: IO[bytes], cache: Optional[HashCache]) -> JSONObject:
    try:  # a single stream's sidecar would vouch for bytes the ranges now write over
        os.unlink(sidecar_path(target))
    except OSError:
        pass
    fd = _open_part(part_path(target), parent)
    old = raise_on_signals()
    datasync = getattr(os, "fdatasync", os.fsync)
    got = 0
    k = -1
    chunks = []  # type: List[str]
    since = 0
    try:
        while True:
            kind, head = src.record()
            if kind == b"E":
                break
            if kind == b"R":
                if k >= 0 and since:
                    datasync(fd)
                    save_range(target, size, span, k, chunks)
                k, off = head.get("k"), head.get("off")
                if k not in have or not isinstance(off, int) or not 0 <= off <= len(have[k]):
                    raise TransferError("{}: cannot start range {} at chunk {}".format(name, k, off))
                chunks = have[k][:off]
                save_range(target, size, span, k, chunks)  # what follows is written over
                since = 0
            elif kind == b"C":
                if k < 0 or len(chunks) >= range_chunks(size, span, k):
                    raise TransferError("{}: a chunk past the end of range {}".format(name, k))
                i = k * span + len(chunks)
                n = min(CHUNK, size - i * CHUNK)
                data = src.read(n)
                if len(data) < n:
                    raise TransferError("the stream ended early (a cut transfer) in {}".format(name))
                h = hashlib.sha256(data).hexdigest()
                if h != head.get("h"):
                    raise TransferError("{}: chunk {} is corrupt (hash mismatch): refused".format(name, i))
                view = memoryview(data)
                pos = i * CHUNK
                while len(view):
                    w = os.pwrite(fd, view, pos)
                    view, pos = view[w:], pos + w
                chunks.append(h)
                got += n
                since += 1
                if since >= SIDECAR_EVERY:
                    datasync(fd)
                    save_range(target, size, span, k, chunks)
                    since = 0
            else:
                raise TransferError("corrupt range stream: unknown record {!r}".format(kind))
    finally:
        if k >= 0 and since:  # what arrived verified stays vouched for, cut or not
            datasync(fd)
            save_range(target, size, span, k, chunks)
        os.close(fd)
        for sig, handler in old:
            signal.signal(sig, handler)
    stdout.write((json.dumps({"done": True, "bytes": got}) + "\n").encode())
    stdout.flush()
    try:
        kind, head = src.record()
    except TransferError:  # the laptop commits on another channel
        return {"bytes": got, "committed": False}
    if kind != b"V":
        raise TransferError("corrupt range stream: expected the verify record")
    commit(base, name, size, span, head, cache)
    return {"bytes": got, "committed": True}


def _complete(name: str, target: str, size: int, span: int, wait: Any) -> List[str]:
    """Every chunk hash of the file from its ranges' sidecars; the laptop sends the verify record
    as soon as it has written everything, so the other channels' last chunks may still be on
    their way: waited for while they keep coming (``wait`` seconds without progress at most)."""
    wait = float(wait) if isinstance(wait, (int, float)) and 0 <= wait <= 600 else 0.0
    last, moved = -1, time.monotonic()
    while True:
        chunks = []  # type: List[str]
        short = None
        for k in range(layout(size, span)):
            got = read_range(target, size, span, k)
            if len(got) != range_chunks(size, span, k) and short is None:
                short = "{}: range {} is incomplete ({} of {} chunks)".format(name, k, len(got), range_chunks(size, span, k))
            chunks += got
        if short is None:
            return chunks
        if len(chunks) != last:
            last, moved = len(chunks), time.monotonic()
        elif time.monotonic() - moved >= wait:
            raise TransferError(short)
        time.sleep(0.02)


def commit(base: Path, name: str, size: int, span: int, head: JSONObject, cache: Optional[HashCache]) -> None:
    """Check the whole file against ``head["h"]`` from every range's sidecar, then cut the part
    file to size, set its mode and mtime, fsync it and rename it into place."""
    mode, mtime, want = head.get("mode"), head.get("mtime"), head.get("h")
    if not isinstance(mode, int) or not isinstance(mtime, int) or not isinstance(want, str):
        raise TransferError("corrupt range stream: a bad verify record")
    parent, leaf = Guard(base, True).place(name)
    target = parent + "/" + leaf
    chunks = _complete(name, target, size, span, head.get("wait", 0))
    whole = hashlib.sha256("".join(chunks).encode()).hexdigest()
    if whole != want:
        drop_part(Path(target))
        raise TransferError("{}: content hash mismatch (sent {}, received {})".format(name, want[:12], whole[:12]))
    tmp = part_path(target)
    fd = os.open(tmp, os.O_RDWR | NOFOLLOW | CLOEXEC)
    try:
        os.ftruncate(fd, size)
        os.fchmod(fd, mode & 0o7777)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.utime(tmp, ns=(mtime, mtime))
    replace(tmp, target)
    durable(Path(parent), [target])
    drop_part(Path(target))
    if cache is not None:
        cache.put(Path(str(base) + "/" + name), whole)
        cache.save()
