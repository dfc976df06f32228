"""A TCP proxy that emulates a slow link: a one-way delay each direction and a bandwidth cap.

``Link(target_port, delay_ms=20, mbit=100)`` listens on ``link.port`` and forwards to
127.0.0.1:target_port. Bytes each way are counted (``up``: client to server). ``cut_after_up``
closes every connection once that many bytes went up (a cut transfer); ``close()`` stops it.
"""

from __future__ import annotations

import queue
import socket
import threading
import time


class Link:
    def __init__(self, target_port: int, delay_ms: float = 0.0, mbit: float = 0.0, cut_after_up: int = 0) -> None:
        self.target = ("127.0.0.1", target_port)
        self.delay = delay_ms / 1000.0
        self.bps = mbit * 1e6 / 8 if mbit else 0.0
        self.cut_after_up = cut_after_up
        self.up = 0
        self.down = 0
        self.connections = 0
        self.cut = threading.Event()
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(self.target)
            except OSError:
                c.close()
                continue
            for x in (c, s):
                x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._socks += [c, s]
                self.connections += 1
            self._pipe(c, s, True)
            self._pipe(s, c, False)

    def _pipe(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        q: queue.Queue = queue.Queue(maxsize=512)  # up to 32 MB in flight: 150 ms at 400 Mbit is 3.75 MB
        state = {"tx": 0.0}

        def reader() -> None:
            while True:
                try:
                    data = src.recv(65536)
                except OSError:
                    data = b""
                now = time.monotonic()
                if data and self.bps:
                    state["tx"] = max(now, state["tx"]) + len(data) / self.bps
                    at = state["tx"] + self.delay
                else:
                    at = now + self.delay
                q.put((at, data))
                if not data:
                    return

        def writer() -> None:
            while True:
                at, data = q.get()
                wait = at - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if not data:
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    return
                if self.cut.is_set():
                    return
                if up and self.cut_after_up and self.up + len(data) > self.cut_after_up:
                    self.kill()
                    return
                try:
                    dst.sendall(data)
                except OSError:
                    return
                if up:
                    self.up += len(data)
                else:
                    self.down += len(data)

        threading.Thread(target=reader, daemon=True).start()
        threading.Thread(target=writer, daemon=True).start()

    def kill(self) -> None:
        """Cut every connection now (as a dropped link would)."""
        self.cut.set()
        with self._lock:
            for x in self._socks:
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                x.close()

    def close(self) -> None:
        self._closed = True
        self.sock.close()
        self.kill()


class LinkProcess:
    """A ``Link`` in its own process, so the emulator does not share the measured tool's GIL
    (in-process, its threads slowed a Python client but not rsync or scp)."""

    def __init__(self, target_port: int, delay_ms: float = 0.0, mbit: float = 0.0) -> None:
        import subprocess
        import sys

        self.proc = subprocess.Popen([sys.executable, __file__, str(target_port), str(delay_ms), str(mbit)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


if __name__ == "__main__":
    import sys

    link = Link(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]))
    print(link.port, flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    link.close()
