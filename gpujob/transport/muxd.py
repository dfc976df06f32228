"""The multiplexer daemon: one paramiko connection to one host, shared by later commands.

``python -m gpujob.transport.muxd SOCKET`` reads the host's ``Endpoint`` (JSON) on stdin, connects, prints
one line (``{"ready": true}`` or the error that ended the connect, in ``GpujobError.to_json``
form) and then serves the Unix socket (mode 0600) until it has been idle for
``GPUJOB_MUX_PERSIST`` seconds (default 1800) or its connection drops. One request per
socket connection, a JSON line:

- ``exec`` (stdin, stdout and stderr pipes attached with SCM_RIGHTS): answers
  ``{"started": true}``, pumps the channel through the pipes, then sends ``{"rc": N}``
  (-1: the link went down first). The client closing the socket ends the command.
- ``call``: a quick agent verb in the kept ``serve`` process for that agent command line;
  answers ``{"rc", "out", "err"}``.
- ``tcp`` (one end of a socket pair attached): opens a ``direct-tcpip`` channel to
  ``host:port`` on the connection, answers ``{"opened": true}`` (or ``{"refused": true,
  "error"}`` when sshd will not) and pumps the channel through the socket until both ends
  are closed.
- ``ping`` and ``exit``.

A request that cannot open a channel answers ``{"stale": true}`` and the daemon leaves, so
the client starts a fresh one.
"""

from __future__ import annotations

import array
import json
import os
import select
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

# isort: off
import gpujob.transport.paramiko_load  # noqa: F401  (first: paramiko without invoke and importlib.metadata)
import paramiko
# isort: on

from gpujob.transport import replies
from gpujob.transport.base import TunnelRefused, pump
from gpujob.transport.chanbuf import open_session
from gpujob.transport.endpoint import Endpoint
from gpujob.transport.mux import Request, describe_error
from gpujob.transport.ssh import link_answers, open_client, open_tunnel, probe_wait, received

PROBE_AFTER = float(os.environ.get("GPUJOB_MUX_PROBE_AFTER", "20"))  # quiet seconds before a ping checks the link
# while a request is open, seconds with no byte from the server before a probe asks whether the
# link still carries packets (a dead link otherwise held a command for the 600 s of its timeout)
PROBE_QUIET = float(os.environ.get("GPUJOB_MUX_PROBE_QUIET", "2"))


def _recv_request(conn: socket.socket) -> tuple[Request, list[int]]:
    buf = bytearray()
    fds: list[int] = []
    while not buf.endswith(b"\n"):
        msg, anc, _flags, _addr = conn.recvmsg(65536, socket.CMSG_SPACE(8 * 4))
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(data[: len(data) - len(data) % a.itemsize])
                fds.extend(a)
        if not msg:
            break
        buf += msg
    return (json.loads(bytes(buf).partition(b"\n")[0]) if buf else {}), fds


def _send(conn: socket.socket, doc: Mapping[str, object]) -> None:
    try:
        conn.sendall(json.dumps(doc).encode() + b"\n")
    except OSError:
        pass


ANSWER_MAX = 64 << 20  # the longest answer line of a kept agent, when the request names none


class _TooLong(Exception):
    """An answer line longer than the request allows."""


def _bounded_line(f: Any, most: int) -> bytearray:
    """One line from ``f`` (paramiko's channel file), read in pieces: ``_TooLong`` past ``most``
    bytes (a line with no end would otherwise be held whole)."""
    out = bytearray()
    while True:
        piece = f.readline(1 << 16)
        out += piece
        if not piece or piece.endswith(b"\n"):
            return out
        if len(out) > most:
            raise _TooLong()


class _Serve:
    """A kept ``python -m remote serve`` channel: one JSON request line, one JSON answer line."""

    def __init__(self, tr: paramiko.Transport, cmd: str, timeout: float) -> None:
        self.chan = tr.open_session(timeout=timeout)
        self.chan.exec_command(cmd)
        self.rfile = self.chan.makefile("rb")
        self.lock = threading.Lock()
        self.answered = False

    def close(self) -> None:
        self.chan.close()


class Daemon:
    """Accepts requests on the socket and runs them over one SSH connection."""

    def __init__(self, client: paramiko.SSHClient, ep: Endpoint, srv: socket.socket, path: Path) -> None:
        self.client, self.endpoint, self.srv, self.path = client, ep, srv, path
        tr = client.get_transport()
        assert tr is not None
        self.tr = tr
        self.persist = float(os.environ.get("GPUJOB_MUX_PERSIST", "1800"))
        self.active = 0
        self.last = time.monotonic()
        self.lock = threading.Lock()
        self.serves: dict[str, _Serve] = {}
        self.stopping = threading.Event()
        self.probe_lock = threading.Lock()
        self.last_probe = time.monotonic()
        self.ino = os.stat(path).st_ino

    # ---- the accept loop ---------------------------------------------------------------
    def serve_forever(self) -> None:
        self.srv.settimeout(1.0)
        threading.Thread(target=self._watchdog, name="gpujob-mux-watchdog", daemon=True).start()
        while not self.stopping.is_set():
            try:
                conn, _ = self.srv.accept()
            except socket.timeout:
                with self.lock:
                    idle = self.active == 0 and time.monotonic() - self.last > self.persist
                if idle or not self.tr.is_active():
                    break
                continue
            except OSError:
                break
            with self.lock:
                self.active += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()
        self.stop()

    def stop(self) -> None:
        """Leave: no new requests (the socket goes first), then the connection closes."""
        with self.lock:
            if self.stopping.is_set():
                return
            self.stopping.set()
        self._unlink()
        self.srv.close()
        self.client.close()

    def _unlink(self) -> None:
        try:  # a successor may already listen under the same name: remove only our own socket
            if os.stat(self.path).st_ino == self.ino:
                self.path.unlink()
        except OSError:
            pass

    def _handle(self, conn: socket.socket) -> None:
        fds: list[int] = []
        try:
            req, fds = _recv_request(conn)
            op = req.get("op")
            if op == "ping":
                ok = self.tr.is_active() and not self.stopping.is_set() and self._fresh()
                if not ok:
                    self.stop()  # the client starts a fresh daemon
                _send(conn, {"ok": ok, "pid": os.getpid()})
            elif op == "rtt":  # a large upload sizes its channels (gpujob/usecases/sync/ranges.py)
                from gpujob.transport.ssh import probe_rtt

                probe_rtt(self.tr)
                _send(conn, {"rtt": getattr(self.tr, "gpujob_rtt", None)})
            elif op == "exit":
                # the socket is gone before the client hears back, and the answer goes before the
                # process can end (stop() ends the accept loop, and with it this daemon thread)
                self._unlink()
                _send(conn, {"ok": True})
                self.stop()
            elif op == "exec" and len(fds) == 3:
                mine, fds = fds, []  # _exec owns (and closes) them from here
                self._exec(conn, str(req["cmd"]), *mine)
            elif op == "tcp" and len(fds) == 1:
                sock, fds = socket.socket(fileno=fds[0]), []
                self._tcp(conn, str(req.get("host", "127.0.0.1")), int(req["port"]), sock)
            elif op == "call":
                self._call(conn, str(req["serve"]), [str(a) for a in req["argv"]], req.get("timeout"), req.get("input"),
                           int(req.get("max") or ANSWER_MAX), int(req.get("reply_max") or 0))
            else:
                _send(conn, {"error": f"unknown request {op!r}", "remedy": "upgrade gpujob", "kind": "ConnectError"})
        except Exception as e:  # one bad request never takes the daemon down
            _send(conn, describe_error(e))
        finally:
            for fd in fds:
                os.close(fd)
            conn.close()
            with self.lock:
                self.active -= 1
                self.last = time.monotonic()

    def _fresh(self) -> bool:
        """After a quiet spell, check that the link still carries packets (a laptop that slept
        finds its TCP connection dead without a word; opening a channel would hang)."""
        with self.probe_lock:
            with self.lock:
                quiet = self.active <= 1 and time.monotonic() - max(self.last, self.last_probe) > PROBE_AFTER
            if not quiet:
                return True
            return self._probe()

    def _probe(self) -> bool:
        """Whether the server answers a keepalive request within a few seconds."""
        if link_answers(self.tr, probe_wait(self.endpoint)):
            self.last_probe = time.monotonic()
            return True
        return False

    def _received(self) -> tuple[Any, Any]:
        return received(self.tr)

    def _watchdog(self) -> None:
        """While requests are open and the server has sent nothing for ``PROBE_QUIET`` s, probe
        the link; no answer means it is dead: the connection closes, every open request ends at
        once (a served one answers stale, so the client reconnects as a direct command would)."""
        seen, quiet_since = self._received(), time.monotonic()
        while not self.stopping.wait(0.5):
            with self.lock:
                busy = self.active > 0
            now_seen = self._received()
            if not busy or now_seen != seen or time.monotonic() - quiet_since < PROBE_QUIET:
                if not busy or now_seen != seen:
                    seen, quiet_since = now_seen, time.monotonic()
                continue
            with self.probe_lock:
                alive = self._probe()
            if alive:
                seen, quiet_since = self._received(), time.monotonic()
                continue
            sys.stderr.write(f"{time.strftime('%H:%M:%S')} the link to {self.endpoint.address} is dead: closing\n")
            sys.stderr.flush()
            self.tr.close()
            self.stop()
            return

    def _open(self) -> paramiko.Channel | None:
        """A new session channel; None when the link is dead. The server refusing one more
        channel (OpenSSH's MaxSessions, 10 by default) raises ``ChannelException``."""
        try:
            return open_session(self.tr, self.endpoint.connect_timeout)
        except paramiko.ChannelException:
            raise
        except (paramiko.SSHException, EOFError, OSError):
            return None

    @staticmethod
    def _busy(conn: socket.socket) -> None:
        _send(conn, {"busy": True})  # the client runs this one command on a connection of its own

    def _stale(self, conn: socket.socket) -> None:
        _send(conn, {"stale": True, "error": f"the connection to {self.endpoint.address} dropped",
                     "remedy": "run the command again", "kind": "ConnectError"})
        self.stop()

    # ---- exec: a command whose pipes the client holds ------------------------------------
    def _exec(self, conn: socket.socket, cmd: str, in_r: int, out_w: int, err_w: int) -> None:
        try:
            chan = self._open()
        except paramiko.ChannelException:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
            self._busy(conn)
            return
        if chan is not None:
            try:
                chan.exec_command(cmd)
            except (paramiko.SSHException, EOFError, OSError):
                chan = None
        if chan is None:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
            self._stale(conn)
            return
        _send(conn, {"started": True})
        # the client stopped reading: the channel closes
        pumps = [threading.Thread(target=pump, args=(chan.recv, out_w, chan.close), daemon=True),
                 threading.Thread(target=pump, args=(chan.recv_stderr, err_w, chan.close), daemon=True)]
        for t in pumps:
            t.start()
        threading.Thread(target=_pump_in, args=(chan, in_r), daemon=True).start()
        threading.Thread(target=_watch_client, args=(conn, chan), daemon=True).start()
        for t in pumps:  # woken by the channel's end, not by a poll: the exit status goes out at once
            t.join()
        _send(conn, {"rc": chan.recv_exit_status()})
        chan.close()
        try:
            conn.shutdown(socket.SHUT_RDWR)  # wakes _watch_client (a close alone would not)
        except OSError:
            pass

    # ---- tcp: a direct-tcpip channel pumped through a socket the client holds the other end of
    def _tcp(self, conn: socket.socket, host: str, port: int, sock: socket.socket) -> None:
        try:
            chan = open_tunnel(self.tr, host, port, self.endpoint.connect_timeout)
        except TunnelRefused as e:
            sock.close()
            _send(conn, {"refused": True, "error": str(e)})
            return
        except (paramiko.SSHException, EOFError, OSError):
            sock.close()
            self._stale(conn)
            return
        _send(conn, {"opened": True})
        conn.close()
        _splice(sock, chan)

    # ---- call: a quick verb in the kept serve process ----------------------------------
    def _call(self, conn: socket.socket, cmd: str, argv: list[str], timeout: float | None,
              data: str | None = None, most: int = 0, reply_max: int = 0) -> None:
        line = json.dumps({"argv": argv, "input": data} if data else {"argv": argv}).encode() + b"\n"
        for _attempt in (0, 1):
            with self.lock:
                s = self.serves.get(cmd)
            if s is None:
                try:
                    s = _Serve(self.tr, cmd, self.endpoint.connect_timeout)
                except paramiko.ChannelException:
                    self._busy(conn)
                    return
                except (paramiko.SSHException, EOFError, OSError):
                    self._stale(conn)
                    return
                with self.lock:
                    self.serves[cmd] = s
            with s.lock:
                try:
                    s.chan.settimeout(timeout)
                    s.chan.sendall(line)
                    answer = _bounded_line(s.rfile, most or ANSWER_MAX)
                except _TooLong:  # a hostile or broken agent: its channel is dropped, no more is read
                    self._drop(cmd, s)
                    _send(conn, replies.too_large(self.endpoint.name, reply_max or most or ANSWER_MAX).to_json())
                    return
                except socket.timeout:
                    self._drop(cmd, s)
                    _send(conn, {"error": f"{self.endpoint.address} did not answer a command within {timeout:.0f}s",
                                 "remedy": "the instance may be overloaded or the link stalled: run the command again",
                                 "kind": "ConnectError"})
                    return
                except (OSError, EOFError, paramiko.SSHException):
                    answer = bytearray()
                if answer:
                    s.answered = True
                    conn.sendall(answer)
                    return
                first = not s.answered
                self._drop(cmd, s)
            if first:  # the serve command itself ended: report as a one-shot command would
                rc = s.chan.recv_exit_status()
                err = b""
                while s.chan.recv_stderr_ready():
                    err += s.chan.recv_stderr(65536)
                if rc >= 0:
                    _send(conn, {"rc": rc, "out": "", "err": err.decode("utf-8", "replace")})
                    return
            if not self.tr.is_active():
                self._stale(conn)
                return
        _send(conn, {"stale": True})

    def warm(self, cmd: str) -> None:
        """Open the kept ``serve`` for ``cmd`` before any request asks (a request that came
        first keeps its own)."""
        try:
            s = _Serve(self.tr, cmd, self.endpoint.connect_timeout)
        except (paramiko.SSHException, EOFError, OSError):
            return  # the first request opens it, and reports what fails
        with self.lock:
            mine = self.serves.setdefault(cmd, s) is s
        if not mine:
            s.close()

    def _drop(self, cmd: str, s: _Serve) -> None:
        with self.lock:
            if self.serves.get(cmd) is s:
                del self.serves[cmd]
        s.close()


def _watch_client(conn: socket.socket, chan: paramiko.Channel) -> None:
    """End the command when the client closes its request socket (Ctrl-C, a killed process)."""
    try:
        while conn.recv(4096):
            pass
    except OSError:
        pass
    chan.close()


def _splice(sock: socket.socket, chan: paramiko.Channel) -> None:
    """Copy bytes both ways between ``sock`` and ``chan``; EOF on one side is passed on as EOF,
    and both close once both directions ended (an error on either drops both)."""

    def up() -> None:  # the client's bytes to the host
        try:
            for data in iter(lambda: sock.recv(65536), b""):
                chan.sendall(data)
            chan.shutdown_write()
        except (OSError, EOFError, paramiko.SSHException):
            chan.close()

    t = threading.Thread(target=up, name="gpujob-mux-tcp", daemon=True)
    t.start()
    try:
        for data in iter(lambda: chan.recv(65536), b""):
            sock.sendall(data)
    except (OSError, EOFError, paramiko.SSHException):
        pass
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    t.join()
    chan.close()
    sock.close()


def _pump_in(chan: paramiko.Channel, fd: int) -> None:
    try:
        while True:
            r, _, _ = select.select([fd], [], [], 1.0)
            if not r:
                if chan.closed:
                    break
                continue
            data = os.read(fd, 65536)
            if not data:
                chan.shutdown_write()
                break
            chan.sendall(data)
    except (OSError, EOFError, paramiko.SSHException):
        pass
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    path = Path(argv[0])
    # started in the background (``mux._Daemon.spawn``): the starter's lock, held until this
    # daemon listens or has failed, so no second daemon starts meanwhile
    lock_fd = int(argv[2]) if argv[1:2] == ["--lock-fd"] else None

    def release() -> None:
        nonlocal lock_fd
        if lock_fd is not None:
            os.close(lock_fd)
            lock_fd = None

    try:
        return _serve(path, release)
    finally:
        release()


def _serve(path: Path, listening: Callable[[], None]) -> int:
    doc = json.loads(sys.stdin.read())
    ep = Endpoint.from_json(doc)  # from the client: the profiles are not read again
    try:
        client = open_client(ep)
    except Exception as e:
        sys.stdout.write(json.dumps(describe_error(e)) + "\n")
        sys.stdout.flush()
        return 1
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        srv.bind(str(path))
    except OSError as e:
        sys.stdout.write(json.dumps({"error": f"cannot listen on {path}: {e}", "remedy": "", "kind": "no_socket"}) + "\n")
        return 1
    finally:
        os.umask(old)
    srv.listen(64)
    listening()
    sys.stdout.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    os.chdir("/")  # hold no folder of the client's busy
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    daemon = Daemon(client, ep, srv, path)
    if doc.get("warm_serve"):
        threading.Thread(target=daemon.warm, args=(str(doc["warm_serve"]),), daemon=True).start()
    daemon.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
