"""Writing a stream: small files in batch records, large files in chunks from an offset; each
file is read and hashed once, under a stat that must not move while it is read."""

import os
from typing import IO, Any, Callable, Iterable, List, Optional, Tuple

from .durable import CLOEXEC
from .format import BATCH_BYTES, BATCH_FILES, CHUNK, MAGIC, Item, TransferError, frame
from .hashing import Hasher, small_hash


def _stamp(st: os.stat_result) -> Tuple[int, int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


READ_TRIES = 3


def _read_small(it: Item) -> bytes:
    """The file's bytes as of one moment: read again when its size or stamps moved during the
    read (``it.st`` and ``it.mtime`` become that moment's); refused after ``READ_TRIES``."""
    for _ in range(READ_TRIES):
        fd = os.open(str(it.path), os.O_RDONLY | CLOEXEC)
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


def _size_now(it: Item, planned: int) -> int:
    try:
        return os.stat(str(it.path)).st_size
    except OSError:
        return planned


def write_items(out: IO[bytes], items: Iterable[Item], delete: Optional[List[str]] = None,
                on_bytes: Optional[Callable[[int], None]] = None,
                on_hash: Optional[Callable[[Item, str], None]] = None, end: Optional[dict] = None,
                changed: Optional[List[str]] = None, keep: Optional[Callable[[Item, bytes], bool]] = None) -> None:
    """Write ``items`` as a verified stream (see the module doc) to ``out``; each file is read
    and hashed once. ``out.flush`` (when there is one) is called after every batch. ``end`` goes
    in the end record. With a ``changed`` list, a file that changes while it is read is left out
    (its name appended there; a large one already under way is sent marked changed, and the
    receiver drops it) instead of ending the stream. ``keep(item, bytes)``, asked of each small file
    with the bytes just read, leaves the file out when False (the laptop's secrets check: one read
    of each file, not two)."""
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
            try:
                if changed is not None:  # a pull: the file as it is now (a log grew, status.json was replaced)
                    it.size = _size_now(it, it.size)
                data = _read_small(it)
            except TransferError:
                if changed is None:
                    raise
                changed.append(it.arcname)
                continue
            if keep is not None and not keep(it, data):
                continue
            digest = small_hash(data)
            ents.append(["f", it.arcname, it.mode & 0o7777, it.mtime, it.size, digest])
            datas.append(data)
            sent.append((it, digest))
            size += it.size
        else:
            flush()
            size = 0
            _write_large(w, it, on_bytes, on_hash, changed)
            continue
        if len(ents) >= BATCH_FILES or size >= BATCH_BYTES:
            flush()
            size = 0
    flush()
    end = dict(end or {})
    if changed:
        end["held"] = sorted(set(end.get("held") or []) | set(changed))
    w(frame(b"E", end))
    if flush_out:
        flush_out()


def _write_large(w: Callable[[bytes], Any], it: Item, on_bytes: Optional[Callable[[int], None]],
                 on_hash: Optional[Callable[[Item, str], None]], changed: Optional[List[str]] = None) -> None:
    h = Hasher(it.prefix)
    msg = "{} changed while being sent".format(it.path)
    torn = False
    with open(str(it.path), "rb") as f:
        before = os.fstat(f.fileno())
        if before.st_size != it.size:
            if changed is None:
                raise TransferError(msg)
            changed.append(it.arcname)
            return
        it.st, it.mtime = before, before.st_mtime_ns
        w(frame(b"F", {"n": it.arcname, "mode": it.mode & 0o7777, "mtime": it.mtime, "size": it.size, "off": it.offset}))
        left = it.size - it.offset
        f.seek(it.offset)
        while left > 0:
            data = f.read(min(1 << 20, left))
            if not data:  # cut short under us: the rest is filler, the file is marked changed
                if changed is None:
                    raise TransferError(msg)
                torn, data = True, bytes(min(1 << 20, left))
            h.update(data)
            w(data)
            left -= len(data)
            if on_bytes:
                on_bytes(len(data))
        if torn or _stamp(os.fstat(f.fileno())) != _stamp(before):  # a torn read: never verified as sent
            if changed is None:
                raise TransferError(msg)
            changed.append(it.arcname)
            w(frame(b"V", {"h": "", "changed": True}))
            return
    digest = h.hexdigest()
    w(frame(b"V", {"h": digest}))
    if on_hash:
        on_hash(it, digest)
