"""Content hashes and the cache that keeps them.

Content hash: sha256 over the concatenated sha256 digests of 4 MiB chunks (one empty chunk
for an empty file), so a resumed file is verified without rereading its prefix.
"""

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from remote.core import atomicfile

from .format import CHUNK


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


def sha256_of(data: Any) -> Any:
    h = _SHA256.copy()
    h.update(data)
    return h


def small_hash(data: Any) -> str:
    """The content hash of at most one chunk (what ``Hasher`` gives), in one call."""
    return sha256_of(sha256_of(data).hexdigest().encode()).hexdigest()


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

    appends = True  # False: ``save`` always rewrites the object (for a cache whose every save changes most of it)

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
    def stat_key(st: os.stat_result) -> List[Any]:
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
        return rec[-1] if rec and rec[:-1] == self.stat_key(st) else None

    def put(self, path: Path, h: str, st: Optional[os.stat_result] = None) -> None:
        self.set(str(path), self.stat_key(st or os.stat(str(path))) + [h])

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
        with self.lock:
            ops, self.ops = self.ops, []
        with atomicfile.locked(self.path):  # receives of several submits at once: a fold loses no append
            self._save(ops)

    def _save(self, ops: List[List[Any]]) -> None:
        assert self.path is not None
        log = str(self.path) + ".log"
        try:
            log_size = os.path.getsize(log)
        except OSError:
            log_size = 0
        try:
            base_size = os.path.getsize(str(self.path))
        except OSError:
            base_size = 0
        if self.appends and log_size + 100 * len(ops) <= max(base_size // 4, 1 << 20):
            data = "".join(json.dumps(op, separators=(",", ":")) + "\n" for op in ops).encode("utf-8", "surrogateescape")
            atomicfile.append(log, data, lock=False)  # the caller holds the lock
            return
        full = self._read()  # the object and the log as they are now (another process may have appended) ...
        for k, rec in ops:  # ... and what this run changed
            if rec is None:
                full.pop(k, None)
            else:
                full[k] = rec
        # dumps: C speed; dump() encodes in Python. Not durable: a lost cache costs hashing again
        atomicfile.write(self.path, json.dumps(full, separators=(",", ":")), durable=False)
        try:
            os.unlink(log)
        except OSError:
            pass
