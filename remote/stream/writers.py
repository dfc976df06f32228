"""The receiver's writing threads: verified small files created by a few threads (the file
system's create cost dominates and overlaps with parsing), a large file's pieces written and
hashed by one thread of its own while the stream is read on."""

import os
import queue
import threading
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

from .durable import CLOEXEC, NOFOLLOW, remove, replace
from .hashing import HashCache, Hasher
from .parts import SIDECAR_EVERY, save_sidecar

WRITERS = 4  # receiver threads writing small files (GPUJOB_SYNC_WRITERS overrides)


FSYNC_EACH = 64  # up to this many small files are fsynced each; more get one syncfs


def write_small(tmp: str, target: str, data: Any, mode: int, mtime: int, umask: int) -> os.stat_result:
    """Create ``tmp`` with ``mode`` (never through a link), write ``data``, set the mtime, rename
    onto ``target``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC
    try:
        fd = os.open(tmp, flags, mode)
    except FileExistsError:  # a leftover of an earlier cut
        remove(tmp)
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
    replace(tmp, target)
    return st


def write_parts(fd: int, parts: List[Any]) -> None:
    """Write ``parts`` one after another at the descriptor's offset (``writev``, all of them)."""
    writev = getattr(os, "writev", None)
    if writev is None:  # not POSIX
        for p in parts:
            view = memoryview(p)
            while len(view):
                view = view[os.write(fd, view):]
        return
    todo = list(parts)
    while todo:
        n = writev(fd, todo[:IOV_MAX])
        while todo and n >= len(todo[0]):
            n -= len(todo[0])
            todo.pop(0)
        if n:
            todo[0] = memoryview(todo[0])[n:]


IOV_MAX = 1024  # pieces one writev takes (POSIX's least IOV_MAX on Linux)


class Writers:
    """A few threads writing verified small files; ``drain`` waits for all given so far and
    raises the first error."""

    def __init__(self, cache: Optional["HashCache"], on_bytes: Optional[Callable[[int], None]]) -> None:
        self.q = queue.Queue(maxsize=64)  # type: Any
        self.cache, self.on_bytes = cache, on_bytes
        self.threads: List[threading.Thread] = []
        self.errors = []  # type: List[BaseException]
        self.written = 0
        self.nbytes = 0
        self.lock = threading.Lock()
        self.paths = []  # type: List[str]  # the first files written (enough to fsync each)
        self.job: List[Tuple[str, str, Any, int, int, str, str]] = []
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
                    st = write_small(tmp, target, data, mode, mtime, self.umask)
                    if self.cache is not None:
                        self.cache.set(key, self.cache.stat_key(st) + [digest])
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


class Sink:
    """Writes and hashes a large file's pieces in a thread of its own (both release the GIL), so
    reading the stream goes on meanwhile. Every ``SIDECAR_EVERY`` chunks the data written so far
    is synced to disk and then the sidecar lists those chunks: in a third thread, so that the
    writing goes on while the disk catches up (on the writing thread each sync held the stream
    up: a 512 MB pull spent 0.4 s in them, BENCHMARKS.md)."""

    def __init__(self, fh: Any, h: Hasher, target: Path) -> None:
        self.fh, self.h, self.target = fh, h, target
        self.q = queue.Queue(maxsize=8)  # type: Any
        self.error = None  # type: Optional[BaseException]
        self.synced = threading.Condition()
        self.to_sync = None  # type: Optional[List[str]]  # the chunks to list once the data is on disk
        self.writing = True
        self.syncer = threading.Thread(target=self._sync, daemon=True)
        self.syncer.start()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def put(self, parts: List[Any]) -> None:
        """The file's next bytes, as the stream's pieces (written with one ``writev``, never joined)."""
        if self.error is not None:
            raise self.error
        self.q.put(parts)

    def _run(self) -> None:
        since = 0
        try:
            self.fh.flush()  # its writes go to the descriptor from here on
            fd = self.fh.fileno()
        except BaseException as e:  # noqa: BLE001 - raised in the reading thread
            self.error, fd = e, -1
        try:
            while True:
                parts = self.q.get()
                if parts is None:
                    return
                if self.error is not None:
                    continue
                try:
                    write_parts(fd, parts)
                    since += sum(self.h.update(p) for p in parts)
                    if since >= SIDECAR_EVERY:
                        # written (no buffer between) before the syncer's sync starts
                        with self.synced:
                            self.to_sync = list(self.h.chunks)  # a newer list replaces one not yet synced
                            self.synced.notify()
                        since = 0
                except BaseException as e:  # noqa: BLE001 - raised in the reading thread
                    self.error = e
        finally:
            with self.synced:
                self.writing = False
                self.synced.notify()

    def _sync(self) -> None:
        datasync = getattr(os, "fdatasync", os.fsync)
        while True:
            with self.synced:
                while self.to_sync is None and self.writing:
                    self.synced.wait()
                chunks, self.to_sync = self.to_sync, None
            if chunks is None:
                return
            try:
                datasync(self.fh.fileno())  # every chunk listed was written before this sync began
                save_sidecar(self.target, chunks)
            except BaseException as e:  # noqa: BLE001 - raised in the reading thread
                self.error = self.error or e

    def close(self) -> None:
        """Wait for every piece given and the last sidecar; raise the first error."""
        self.q.put(None)
        self.t.join()
        self.syncer.join()
        if self.error is not None:
            raise self.error
