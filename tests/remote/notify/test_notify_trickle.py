"""A webhook that answers a byte at a time never trips a socket's per-read timeout: the whole answer is
bounded (``WHOLE_ANSWER`` timeouts), on the agent's sender (urllib) and on the laptop's ``notify test``
(httpx), and the connection is ended. A real HTTP server that trickles its status line's headers."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli


@pytest.fixture
def trickler() -> Iterator[tuple[str, list[float]]]:
    """A server that reads a request, then sends one header byte every 0.5 s, for ever; ``closed``: when
    each connection was ended by the client."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    closed: list[float] = []
    stop = threading.Event()

    def serve(c: socket.socket) -> None:
        c.recv(65536)
        try:
            c.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while not stop.is_set():
                c.sendall(b"a")
                time.sleep(0.5)
        except OSError:
            closed.append(time.monotonic())
        finally:
            c.close()

    def accept() -> None:
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}/hook", closed
    stop.set()
    srv.close()


def test_the_agents_sender_bounds_a_trickling_answer(trickler: tuple[str, list[float]]) -> None:
    from gpujob.bundle import import_remote

    url, closed = trickler
    notify = import_remote("notify")
    got: list[dict] = []
    sender = threading.Thread(target=lambda: got.append(notify.send_channel(
        {"type": "webhook", "url": url}, "t", "x", {"event": "test", "job_id": "j"}, None, retries=0, timeout=1.0)),
        daemon=True)
    sender.start()
    sender.join(60)  # it ran for ever: each byte came within the socket's per-read timeout
    assert got, "the sender still waits on the trickling answer"
    out = got[0]
    assert out["ok"] is False and "no whole answer within 3 s" in out["error"], out
    deadline = time.monotonic() + 30
    while not closed and time.monotonic() < deadline:
        time.sleep(0.1)
    assert closed, "the connection to the trickling server was left open"


def test_notify_test_bounds_a_trickling_answer(trickler: tuple[str, list[float]], tmp_path: Path) -> None:
    url, _ = trickler
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({"name": "n", "run": "true", "notify": {"channels": [{"type": "webhook", "url": url}]}}))
    r = run_cli("notify", "test", str(job), timeout=100)
    assert r.returncode != 0 and "no whole answer within" in r.stdout + r.stderr, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
