"""A TCP link between the laptop and an instance that a test can cut, freeze and resume.

``LinkProxy(target_port, rate=B)`` listens on 127.0.0.1:``port`` and forwards every connection to
127.0.0.1:``target_port``. ``freeze()`` stops moving bytes both ways (connections stay open:
a laptop that slept, a NAT that dropped its state); ``cut()`` closes every connection and
refuses new ones (an instance that went away); ``resume()`` moves bytes again and accepts.
``latency``: each chunk waits that long before it is passed on (a far link's delay, so the two
ends' messages cross as they would there); ``chunks`` records each chunk's direction (True:
toward the target) and size, in the order the proxy read them.
"""

from __future__ import annotations

import select
import socket
import threading
import time


class LinkProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1", rate: float = 0.0,
                 latency: float = 0.0) -> None:
        self.target = (target_host, target_port)
        self.rate = rate  # bytes per second each way per connection (0: as fast as it goes)
        self.latency = latency
        self.chunks: list[tuple[bool, int]] = []
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self.refusing = False
        self.closed = False
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.lock = threading.Lock()
        self.bytes = 0  # forwarded so far, both ways
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.srv.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self.pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        try:
            while not self.closed:
                self.flowing.wait()
                r, _, _ = select.select([a, b], [], [], 0.2)
                for s in r:
                    if not self.flowing.is_set():
                        break  # frozen between select and read: the bytes wait in the kernel
                    data = s.recv(65536)
                    if not data:
                        return
                    self.chunks.append((s is a, len(data)))
                    if self.latency:
                        time.sleep(self.latency)
                    peer[s].sendall(data)
                    self.bytes += len(data)
                    if self.rate:  # a link of known speed: a cut lands where the test wants it
                        time.sleep(len(data) / self.rate)
        except (OSError, ValueError):  # cut: the sockets were closed under us
            pass
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def freeze(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.refusing = False
        self.flowing.set()

    def cut(self) -> None:
        """Close every open connection (with a reset) and refuse new ones until ``resume``."""
        self.refusing = True
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for a, b in pairs:
            for s in (a, b):
                try:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    s.close()
                except OSError:
                    pass
        self.flowing.set()

    def close(self) -> None:
        self.closed = True
        self.flowing.set()
        self.cut()
        self.srv.close()
