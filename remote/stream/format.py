"""The wire format: record framing, what is sent (``Item``) and the compressing writer.

A stream is ``MAGIC``, then records, each one type byte, a 4-byte big-endian length and that
many bytes of JSON header (``frame``), then the payload the header announces (see the package
doc for the record types).
"""

import json
import os
import struct
import zlib
from pathlib import Path
from typing import IO, Any, List, Optional

CHUNK = 4 << 20


MAGIC = b"GJS1"
BATCH_FILES = 256  # small files per batch record (smaller batches start the receiver sooner)
BATCH_BYTES = 8 << 20
MAX_HEAD = 16 << 20  # a larger record header is refused as corrupt
MAX_BATCH = 64 << 20


REC = struct.Struct(">cI")


class TransferError(Exception):
    """A refused or corrupt member; the message names it."""


def raise_on_signals() -> List[Any]:
    """Make a hang-up, termination or broken pipe raise ``TransferError`` (so a receiver's
    ``finally`` records what arrived verified); returns the old handlers to put back."""
    import signal

    def on_signal(signum: int, frame: Any) -> None:
        raise TransferError("interrupted by signal {}".format(signum))

    old = []
    try:
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
            old.append((sig, signal.signal(sig, on_signal)))
    except (ValueError, OSError, AttributeError):  # not the main thread
        pass
    return old


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
    return REC.pack(kind, len(doc)) + doc


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
