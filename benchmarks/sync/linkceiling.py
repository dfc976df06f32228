"""The link emulator's own ceiling: plain TCP (no SSH, no window but the kernel's) through
``linkemu.LinkProcess`` to a sink, each way, unshaped and at the shapes the sync benchmark uses.
A shaped link that delivers its rate here is not the bottleneck of a tool measured through it.

    python benchmarks/sync/linkceiling.py [--mb 256]
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def sink_server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            def drain(c: socket.socket = c) -> None:
                n = 0
                while True:
                    data = c.recv(1 << 20)
                    if not data:
                        break
                    n += len(data)
                c.sendall(str(n).encode())
                c.close()
            threading.Thread(target=drain, daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def push(port: int, nbytes: int) -> float:
    s = socket.create_connection(("127.0.0.1", port))
    block = b"\0" * (1 << 20)
    t = time.monotonic()
    left = nbytes
    while left > 0:
        s.sendall(block[: min(left, len(block))])
        left -= len(block)
    s.shutdown(socket.SHUT_WR)
    got = int(s.recv(64) or b"0")
    dt = time.monotonic() - t
    s.close()
    assert got == nbytes, (got, nbytes)
    return nbytes / dt / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    a = ap.parse_args()
    from linkemu import LinkProcess

    srv, port = sink_server()
    print("| link shape | claimed MB/s | through the emulator MB/s |")
    print("|---|---:|---:|")
    for name, delay, mbit in (("unshaped", 0.0, 0.0), ("40 ms / 100 Mbit", 20.0, 100.0),
                              ("40 ms / 1 Gbit", 20.0, 1000.0), ("150 ms / 400 Mbit", 75.0, 400.0)):
        link = LinkProcess(port, delay, mbit)
        try:
            rate = push(link.port, a.mb << 20)
        finally:
            link.close()
        claimed = f"{mbit / 8:.1f}" if mbit else "–"
        print(f"| {name} | {claimed} | {rate:.1f} |", flush=True)
    srv.close()


if __name__ == "__main__":
    main()
