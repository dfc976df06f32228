"""The link emulator's own ceiling: plain TCP (no SSH, no window but the kernel's) through
``linkemu.LinkProcess`` to a sink, each way, unshaped and at the shapes the sync benchmark uses.
A shaped link that delivers its rate here is not the bottleneck of a tool measured through it.
``--streams 1,4`` also pushes N connections at once (the total they carry): the emulator shapes
each connection on its own, so N connections are N links; gpujob's ranged channels share one
SSH connection, i.e. one shaped link, which one stream's column is the ceiling of.

    python benchmarks/sync/linkceiling.py [--mb 256] [--streams 1] [--shapes 150]
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


def push_many(port: int, nbytes: int, n: int) -> float:
    """``n`` connections at once, ``nbytes`` in all: the MB/s they carry together."""
    if n == 1:
        return push(port, nbytes)
    t = time.monotonic()
    threads = [threading.Thread(target=push, args=(port, nbytes // n)) for _ in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return nbytes / (time.monotonic() - t) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--streams", default="1", help="connections at once, a column each: 1,4")
    ap.add_argument("--shapes", default="", help="only the shapes whose name holds one of these: 150,unshaped")
    a = ap.parse_args()
    streams = [int(x) for x in a.streams.split(",")]
    from linkemu import LinkProcess

    srv, port = sink_server()
    heads = " | ".join(f"{n} stream{'s' if n > 1 else ''} MB/s" for n in streams)
    print(f"| link shape | claimed MB/s | {heads} |")
    print("|---|---:|" + "---:|" * len(streams))
    for name, delay, mbit in (("unshaped", 0.0, 0.0), ("40 ms / 100 Mbit", 20.0, 100.0),
                              ("40 ms / 1 Gbit", 20.0, 1000.0), ("150 ms / 400 Mbit", 75.0, 400.0)):
        if a.shapes and not any(w in name for w in a.shapes.split(",")):
            continue
        rates = []
        for n in streams:
            link = LinkProcess(port, delay, mbit)
            try:
                rates.append(push_many(link.port, a.mb << 20, n))
            finally:
                link.close()
        claimed = f"{mbit / 8:.1f}" if mbit else "–"
        print(f"| {name} | {claimed} | " + " | ".join(f"{r:.1f}" for r in rates) + " |", flush=True)
    srv.close()


if __name__ == "__main__":
    main()
