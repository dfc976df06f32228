"""One process per sync serving every channel of a ranged upload (``ranges``) over TCP.

``serve``: one process per sync serving every channel, reached over SSH ``direct-tcpip``
channels (no login shell and no Python start per channel: on a far link each ``range``
command answered 0.9–2.3 s after it was opened). It listens on 127.0.0.1, writes one line
``{"port", "token", "have"}`` on its stdout (``have``: what a channel's first line would say,
for every range of the files named in ``--files``, so the channels send without waiting for it;
the encrypted exec channel: the token is in no argv, log or file) and serves each connection in a thread: the token line, a header line (what a
``range`` command takes as arguments), then exactly a channel's stream (``ranges``), and last a
line ``{"exit": N}`` (what the command's exit status said). Its stdin reaching EOF (the
laptop done, killed or cut off) ends it; a line there ``{"dial": port, "n": n}`` has it
connect ``n`` times to the laptop's port forwarded by this host's sshd and name their origins
on its stdout (``dial_request``): those channels start with the header, no token (the laptop
knows them by their origin), and open a round trip sooner than the laptop's own.
"""

import contextlib
import hmac
import json
import os
import secrets
import socket
import threading
import time
from typing import IO, Callable, List, Mapping, Optional, Set

from remote.core.jsontypes import JSONObject

HELLO_WAIT = float(os.environ.get("GPUJOB_RANGE_HELLO_WAIT", "10"))  # seconds to present the token and header


def serve(control_in: IO[bytes], control_out: IO[bytes],
          handle: Callable[[JSONObject, IO[bytes], IO[bytes]], int], first: Mapping[str, object]) -> JSONObject:
    """Serve range channels until ``control_in`` ends (see the module doc): ``handle(header,
    rfile, wfile)`` speaks one channel and returns its exit status; ``first`` goes in the first
    line too. At the end the listener and every open connection are shut (their receivers
    record what arrived verified)."""
    token = secrets.token_hex(24)
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    open_conns: Set[socket.socket] = set()
    threads: List[threading.Thread] = []
    lock = threading.Lock()
    served = [0]

    def one(conn: socket.socket) -> None:
        try:
            _serve_one(conn, token, handle, served)
        finally:
            with lock:
                open_conns.discard(conn)
            conn.close()

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:  # shut at the end
                return
            with lock:
                open_conns.add(conn)
                t = threading.Thread(target=one, args=(conn,), name="gpujob-range-conn", daemon=True)
                threads.append(t)
            t.start()

    def serve_dialed(conn: socket.socket) -> None:
        try:
            _serve_one(conn, "", handle, served, dialed=True)
        finally:
            with lock:
                open_conns.discard(conn)
            conn.close()

    def dial(port: int, n: int) -> None:  # channels the laptop asked for: this end connects (see ``dial_request``)
        dialed = []
        for _ in range(n):
            try:
                conn = socket.create_connection(("127.0.0.1", port), HELLO_WAIT)
            except OSError:
                break
            with lock:
                open_conns.add(conn)
            dialed.append(conn)
        control_out.write((json.dumps({"dialled": [list(c.getsockname()[:2]) for c in dialed]}) + "\n").encode())
        control_out.flush()
        for conn in dialed:
            t = threading.Thread(target=serve_dialed, args=(conn,), name="gpujob-range-dialed", daemon=True)
            with lock:
                threads.append(t)
            t.start()

    threading.Thread(target=accept, name="gpujob-range-accept", daemon=True).start()
    control_out.write((json.dumps(dict(first, port=srv.getsockname()[1], token=token)) + "\n").encode())
    control_out.flush()
    try:
        while True:  # EOF is the end; a line asks for channels dialled back
            line = control_in.readline(4097)
            if not line:
                break
            ask = dial_request(line)
            if ask:
                dial(*ask)
    except (OSError, ValueError):
        pass
    with contextlib.suppress(OSError):
        srv.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone would not)
    srv.close()
    with lock:
        for conn in open_conns:  # their receivers meet the end of the stream, as a cut command's do
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RD)
        waiting = list(threads)
    deadline = time.monotonic() + 10
    for t in waiting:
        t.join(max(0.0, deadline - time.monotonic()))
    return {"served": served[0]}


DIAL_MAX = 64  # channels one line may ask to be dialled back


def dial_request(line: bytes) -> Optional[List[int]]:
    """``[port, n]`` from a control line ``{"dial": port, "n": n}``, else None: connect ``n``
    times to ``port`` on 127.0.0.1 (the laptop's port forwarded by this host's sshd: SSH
    ``tcpip-forward``), then say on stdout, as ``{"dialled": [[addr, port], ...]}``, where
    each connection comes from. Each reaches the laptop as a channel already open, with that
    origin: the laptop sends at once on the ones it was told of (its only proof of who dialled:
    anyone here may connect to that port, but no other socket has these origins), a round trip
    before a channel it opens to this server could carry anything."""
    try:
        doc = json.loads(line.decode())
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict):
        return None
    port, n = doc.get("dial"), doc.get("n")
    if not isinstance(port, int) or not 0 < port < 65536 or not isinstance(n, int) or not 0 < n <= DIAL_MAX:
        return None
    return [port, n]


def _serve_one(conn: socket.socket, token: str, handle: Callable[[JSONObject, IO[bytes], IO[bytes]], int],
               served: List[int], dialed: bool = False) -> None:
    """One connection: the token, the header, the channel, the exit line. A wrong or missing
    token (or none within ``HELLO_WAIT``) drops the connection unanswered; one this end
    ``dialed`` starts at the header (the laptop knows it by its origin: ``dial_request``)."""
    conn.settimeout(HELLO_WAIT)
    rfile, wfile = conn.makefile("rb"), conn.makefile("wb")
    try:
        if not dialed and not hmac.compare_digest(rfile.readline(256).strip(), token.encode()):
            return
        head = json.loads(rfile.readline(65536).decode())
        if not isinstance(head, dict):
            return
        conn.settimeout(None)
        served[0] += 1
        rc = handle(head, rfile, wfile)
        wfile.write((json.dumps({"exit": rc}) + "\n").encode())
        wfile.flush()
    except (OSError, ValueError):  # dropped, timed out, or not our client
        pass
    finally:
        for f in (rfile, wfile):
            with contextlib.suppress(OSError):
                f.close()
