"""A session channel's stdout as paramiko's transport thread receives it, without copies.

paramiko keeps what a channel received in a ``BufferedPipe``: an ``array`` each packet is copied
into, and each read copies out of and then shifts (``del buf[:n]``: a memmove of everything
still held, up to the whole window, on every read). A download read that way cost more CPU in
the buffer than in the decryption. ``PacketPipe`` keeps the packets as they came and hands them
out whole (joined only when a read spans several); ``ChannelReader`` is a session's stdout read
in the reading thread itself, with no pump thread and OS pipe between the channel and the reader.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

# isort: off
import gpujob.transport.paramiko_load  # noqa: F401  (first: paramiko without invoke and importlib.metadata)
import paramiko
from paramiko.buffered_pipe import BufferedPipe, PipeTimeout
# isort: on

READ_MOST = 1 << 20  # bytes one read hands out at most (what a read of "everything" takes a step)
# The largest packet a session channel asks the server for (paramiko's default is 32 KB, OpenSSH's
# own limit 256 KB): OpenSSH's sshd fills larger packets when its buffer holds more, fewer packets
# cost paramiko's transport thread less (BENCHMARKS.md, issue 38's second round).
MAX_PACKET = 1 << 18
# A read of READ_MOST or more (a bulk one: a download's, the kept connection's pump) that finds
# less than GATHER held waits up to GATHER_WAIT s for that much: one wake of the reading thread
# for several packets instead of one each (each wake is a hand-over of the GIL in this process).
GATHER, GATHER_WAIT = 1 << 18, 0.002


class PacketPipe(BufferedPipe):
    """paramiko's ``BufferedPipe`` (locking, close, timeouts, the event behind ``fileno``) over a
    queue of the received packets instead of one array."""

    # BufferedPipe's own state, which paramiko's stub leaves out (paramiko/buffered_pipe.py, 3.4 to 5.x)
    _lock: threading.Lock
    _cv: threading.Condition
    _closed: bool

    def __init__(self) -> None:
        super().__init__()
        self._chunks: collections.deque[bytes] = collections.deque()
        self._held = 0  # bytes in _chunks, less _pos
        self._pos = 0  # how much of _chunks[0] was read already
        self._least = 1  # what a waiting reader wants held before it is woken

    def set_event(self, event) -> None:  # noqa: ANN001 - paramiko's or-pipe event
        with self._lock:
            self._event = event
            if self._closed or self._held:  # as BufferedPipe: a select() on a closed or full pipe wakes
                event.set()
            else:
                event.clear()

    def feed(self, data: bytes) -> None:
        with self._lock:
            if self._event is not None:
                self._event.set()
            if data:
                self._chunks.append(bytes(data))
                self._held += len(data)
            if self._held >= self._least or not data:
                self._cv.notify_all()

    def read_ready(self) -> bool:
        with self._lock:
            return self._held > 0

    def read(self, nbytes: int, timeout: float | None = None) -> bytes:
        """At most ``nbytes`` of what arrived, waiting (at most ``timeout``) until something did;
        b"" once closed and empty."""
        with self._lock:
            while not self._held and not self._closed:
                if timeout == 0.0:
                    raise PipeTimeout()
                then = time.monotonic()
                self._cv.wait(timeout)
                if timeout is not None:
                    timeout -= time.monotonic() - then
                    if timeout <= 0.0 and not self._held:
                        raise PipeTimeout()
            if nbytes >= READ_MOST and self._held < GATHER and not self._closed:
                self._least = GATHER
                self._cv.wait(GATHER_WAIT)  # woken by the feed that makes GATHER, by close, or after the wait
                self._least = 1
            out = self._take(nbytes)
            if not self._held and self._event is not None and not self._closed:
                self._event.clear()
            return out

    def _take(self, nbytes: int) -> bytes:
        """Up to ``nbytes`` from the front (the lock held): a whole packet as it is when it fits."""
        chunks = self._chunks
        pieces = []
        want = min(nbytes, self._held)
        while want:
            first = chunks[0]
            left = len(first) - self._pos
            if left <= want:
                pieces.append(first[self._pos:] if self._pos else first)
                chunks.popleft()
                self._pos = 0
                want -= left
                self._held -= left
            else:
                pieces.append(first[self._pos:self._pos + want])
                self._pos += want
                self._held -= want
                want = 0
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def empty(self) -> bytes:
        with self._lock:
            out = self._take(self._held)
            if self._event is not None and not self._closed:
                self._event.clear()
            return out

    def __len__(self) -> int:
        with self._lock:
            return self._held


def open_session(tr: paramiko.Transport, timeout: float | None = None) -> paramiko.Channel:
    """A session channel that receives into a ``PacketPipe``, in packets of up to ``MAX_PACKET``.

    The pipe is put in before the command is started: a session receives nothing until then."""
    chan = tr.open_session(max_packet_size=MAX_PACKET, timeout=timeout)
    chan.in_buffer = PacketPipe()
    return chan


class ChannelReader:
    """A session's stdout read straight from its channel: ``read``, ``read1`` and ``readline``
    as a buffered reader gives them, each packet handed on as received when it fits."""

    def __init__(self, recv: Callable[[int], bytes]) -> None:
        self._recv = recv
        self._rest = b""  # what a readline took past its line
        self._pos = 0
        self.closed = False

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True
        self._rest = b""

    def read1(self, n: int = -1) -> bytes:
        """What has arrived, at most ``n`` bytes (waits only until something has); b"" at the end."""
        if self.closed:
            raise ValueError("read of a closed stream")
        if n == 0:
            return b""
        if self._rest:
            end = len(self._rest) if n < 0 else min(len(self._rest), self._pos + n)
            out = self._rest[self._pos:end]
            self._pos = end
            if end == len(self._rest):
                self._rest, self._pos = b"", 0
            return out
        return self._recv(READ_MOST if n < 0 else n)

    def read(self, n: int = -1) -> bytes:
        """``n`` bytes (all to the end with -1), fewer only at the end."""
        pieces = []
        got = 0
        while n < 0 or got < n:
            data = self.read1(READ_MOST if n < 0 else min(n - got, READ_MOST))
            if not data:
                break
            pieces.append(data)
            got += len(data)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def readline(self, limit: int = -1) -> bytes:
        """One line with its newline (at most ``limit`` bytes; the end of the stream ends it too)."""
        pieces = []
        got = 0
        while limit < 0 or got < limit:
            data = self.read1(-1 if limit < 0 else limit - got)
            if not data:
                break
            cut = data.find(b"\n") + 1
            if cut:
                if cut < len(data):  # the rest is read next
                    if self._rest:
                        self._pos -= len(data) - cut
                    else:
                        self._rest, self._pos = data, cut
                pieces.append(data[:cut])
                break
            pieces.append(data)
            got += len(data)
        return b"".join(pieces)
