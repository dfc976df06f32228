"""The client side of the connection multiplexer: commands over a kept-open SSH connection.

Like OpenSSH's ControlMaster with ControlPersist: a small daemon (``gpujob.transport.muxd``)
holds the paramiko connection and listens on a Unix socket that only this user can reach. The
first command to a host connects on its own (no wait for a second Python to import paramiko
and log in) and starts the daemon in the background as it ends (``start_in_background``).
Later commands hand the daemon their pipes (SCM_RIGHTS) and
so skip importing paramiko, the TCP and SSH handshakes and the login. The daemon also keeps
one agent ``serve`` process open per agent version, so quick read-only verbs (status,
watch, hello) cost one round trip and no process start on the instance.

The daemon leaves after ``GPUJOB_MUX_PERSIST`` idle seconds (default 1800) or as soon as its
connection drops. ``GPUJOB_MUX=0`` (or a host without a usable socket folder) falls back to
one connection per command. This module imports no paramiko.
"""

from __future__ import annotations

import array
import atexit
import base64
import hashlib
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict

from gpujob.bundle import import_remote
from gpujob.errors import ConnectError, GpujobError, HostKeyChanged
from gpujob.jsontypes import JSONObject
from gpujob.transport import replies
from gpujob.transport.base import (
    Forward,
    PumpedStream,
    Result,
    SocketTunnel,
    Stream,
    Transport,
    Tunnel,
    TunnelRefused,
)
from gpujob.transport.endpoint import Endpoint, Target, as_endpoint

ERRORS = {"ConnectError": ConnectError, "HostKeyChanged": HostKeyChanged, "UnreadableReply": replies.UnreadableReply}


def enabled() -> bool:
    """Whether commands go through the multiplexer (POSIX only; ``GPUJOB_MUX=0`` turns it off)."""
    return os.name == "posix" and os.environ.get("GPUJOB_MUX", "1") not in ("0", "no", "false", "off")


def mux_dir() -> Path | None:
    """The socket folder (mode 0700, owned by this user), or None when no safe one exists."""
    base = os.environ.get("GPUJOB_MUX_DIR")
    if base:
        d = Path(base)
    else:
        run = os.environ.get("XDG_RUNTIME_DIR")
        d = Path(run) / "gpujob-mux" if run and os.path.isdir(run) else Path(tempfile.gettempdir()) / f"gpujob-mux-{os.getuid()}"
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = d.stat()
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None  # someone else's folder, or readable by others: never hand out a shell there
    return d


def socket_key(ep: Endpoint) -> str:
    """What identifies one connection: the address, the login and the keys and known_hosts used."""
    ident = [ep.known_hosts, ep.client_key, ep.hostname, ep.port, ep.user, ep.identity_file or "", ep.connect_timeout]
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:20]


class Request(TypedDict, total=False):
    """One request line to the daemon (muxd.py serves it): ``op`` and what that op takes."""

    op: str  # ping, exit, exec (cmd), tcp (host, port), call (the rest)
    cmd: str
    host: str
    port: int
    serve: str  # the kept agent's ``serve`` command
    argv: list[str]
    timeout: float | None
    input: str  # base64
    max: int  # the longest answer line read
    reply_max: int


def _raise_doc(doc: JSONObject) -> None:
    kind, error, remedy = doc.get("kind", ""), doc.get("error", "the connection failed"), doc.get("remedy", "")
    cls = ERRORS.get(kind, ConnectError) if isinstance(kind, str) else ConnectError  # describe_error's text
    raise cls(error if isinstance(error, str) else "the connection failed", remedy if isinstance(remedy, str) else "")


def _request(path: Path, req: Request, fds: list[int] | None = None, timeout: float | None = None) -> socket.socket:
    """Connect to the daemon and send one request line (with ``fds`` attached)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect(str(path))
        data = json.dumps(req).encode() + b"\n"
        if fds:
            s.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        else:
            s.sendall(data)
    except BaseException:
        s.close()
        raise
    return s


class _TooLong(ValueError):
    """A line from the daemon longer than the caller allows."""


def line_limit(limit: int | None) -> int:
    """The longest answer line of the kept agent for a reply of ``limit`` bytes: the reply is a JSON
    string in it (escaping at most doubles text) with its stderr and exit code beside it."""
    return (limit or replies.DEFAULT_LIMIT) * replies.SERVE_OVERHEAD + (1 << 20)


def _read_line(s: socket.socket, buf: bytearray | None = None, most: int | None = None) -> JSONObject | None:
    """One JSON line from the daemon; None when it closed first; ``_TooLong`` past ``most`` bytes."""
    buf = buf if buf is not None else bytearray()
    end = buf.find(b"\n")
    while end < 0:
        chunk = s.recv(65536)
        if not chunk:
            return None
        at = chunk.find(b"\n")  # only the new bytes are searched: a long line costs one pass
        end = len(buf) + at if at >= 0 else -1
        buf += chunk
        if most is not None and end < 0 and len(buf) > most:
            raise _TooLong()
    line = bytes(buf[:end])
    del buf[:end + 1]
    if most is not None and not replies.depth_ok(line.decode("utf-8", "replace"), 4):
        raise ValueError("nested too deep")  # the kept agent's answer is one flat object
    doc = json.loads(line)
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    return doc


# a background start waits (up to 2 s) for the command that started it to exit before Python
# starts: the daemon's interpreter start, paramiko import and key exchange (~0.3 s of CPU) then
# never slow that command's last steps (its exit on a busy 2-core laptop took 0.1–0.4 s longer)
_AFTER_EXIT = ('i=0; while kill -0 {pid} 2>/dev/null && [ "$i" -lt 40 ]; do sleep 0.05; i=$((i + 1)); done; '
               'exec "$0" -m gpujob.transport.muxd "$@"')


class _Daemon:
    """Finds or starts the daemon for one host."""

    def __init__(self, ep: Endpoint, directory: Path) -> None:
        self.endpoint = ep
        self.warm: str | None = None  # the agent's ``serve`` command a background start opens at once
        key = socket_key(ep)
        self.path = directory / f"{key}.sock"
        self.lock = directory / f"{key}.lock"

    def _ask(self, op: str) -> JSONObject | None:
        """One small request; None when no daemon answers."""
        try:
            s = _request(self.path, {"op": op}, timeout=5)
        except OSError:
            return None
        try:
            return _read_line(s)
        except (OSError, ValueError):
            return None
        finally:
            s.close()

    def ping(self) -> bool:
        doc = self._ask("ping")
        return bool(doc and doc.get("ok"))

    def ensure(self) -> bool:
        """A live daemon answers on the socket (started now if needed). False: fall back to direct."""
        if self.ping():
            return True
        filelock = import_remote("core.filelock")
        with open(self.lock, "a") as lk:
            filelock.lock(lk.fileno())  # one starter at a time; the others find its socket
            if self.ping():
                return True
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            return self._start()

    def spawn(self) -> None:
        """Start the daemon and return at once (it connects on its own). Nothing when one answers
        or another command is starting one: the lock goes to the new daemon, which lets go of it
        once it listens (or has failed), so ``ensure`` waits for it and a second starter does not
        start another. A daemon that cannot start only leaves its reason in the log."""
        filelock = import_remote("core.filelock")
        try:
            lk = os.open(self.lock, os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError:
            return
        try:
            if not filelock.lock(lk, blocking=False) or self.ping():
                return
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            with open(self.path.with_suffix(".log"), "ab") as log:
                proc = subprocess.Popen(
                    ["/bin/sh", "-c", _AFTER_EXIT.format(pid=os.getpid()), sys.executable, str(self.path), "--lock-fd", str(lk)],
                    stdin=subprocess.PIPE, stdout=log, stderr=log, start_new_session=True, pass_fds=(lk,),
                )
            assert proc.stdin is not None
            doc = dict(self.endpoint.to_json(), warm_serve=self.warm)
            with proc.stdin:
                proc.stdin.write(json.dumps(doc).encode())  # on stdin: no host detail in ps
        except OSError:  # no fork, or the daemon died at once
            pass
        finally:
            os.close(lk)

    def _start(self) -> bool:
        log = open(self.path.with_suffix(".log"), "ab")
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gpujob.transport.muxd", str(self.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, start_new_session=True, close_fds=True,
            )
        except OSError:
            return False
        finally:
            log.close()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(self.endpoint.to_json()).encode())  # on stdin: no host detail in ps
        proc.stdin.close()
        line = proc.stdout.readline()  # "ready", or the error that ended the connect
        proc.stdout.close()
        if not line:
            proc.wait(5)
            return False
        doc = json.loads(line)
        if doc.get("ready"):
            return True
        proc.wait(5)
        if doc.get("kind") == "no_socket":  # this folder cannot hold a socket: connect directly
            return False
        _raise_doc(doc)
        return False

    def exit(self) -> bool:
        """Ask the daemon to close its connection and leave; True if one was there."""
        return self._ask("exit") is not None


def _daemon_for(target: Target) -> _Daemon | None:
    """The daemon's place for ``target``; None when the multiplexer cannot be used."""
    if not enabled():
        return None
    d = mux_dir()
    if d is None:
        return None
    daemon = _Daemon(as_endpoint(target), d)
    if len(str(daemon.path)) > 100:  # AF_UNIX paths are short (104–108 bytes)
        return None
    return daemon


def connect(target: Target) -> MuxTransport | None:
    """The kept connection to ``target`` when its daemon answers; None when there is none (the
    caller connects on its own, then calls ``start_in_background``) or the multiplexer is off."""
    daemon = _daemon_for(target)
    if daemon is None or not daemon.ping():
        return None
    return MuxTransport(daemon.endpoint, daemon)


def start(target: Target) -> bool:
    """Start the daemon for ``target`` now and wait until it listens (True), or fail as its
    connect did; False when the multiplexer cannot be used. For callers that want the kept
    connection before their first command."""
    daemon = _daemon_for(target)
    return daemon is not None and daemon.ensure()


START_AFTER = 5.0  # a command still running after this many seconds starts the daemon now
_to_start: dict[Path, _Daemon] = {}
_to_start_lock = threading.Lock()


def _start_pending() -> None:
    with _to_start_lock:
        daemons = list(_to_start.values())
        _to_start.clear()
    for d in daemons:
        d.spawn()


def start_in_background(target: Target) -> None:
    """Have the daemon for ``target`` started for the commands that follow this one: as this
    process exits, or after ``START_AFTER`` s of a longer command. Not at once: its paramiko
    import and key exchange would compete for the CPU with this command's own."""
    daemon = _daemon_for(target)
    if daemon is None:
        return
    with _to_start_lock:
        first = not _to_start
        _to_start[daemon.path] = daemon
    if first:
        atexit.register(_start_pending)
        timer = threading.Timer(START_AFTER, _start_pending)
        timer.daemon = True
        timer.start()


def disconnect(target: Target) -> bool:
    """Close the kept connection to ``target`` (``host trust``, ``host rm``); True if one was open."""
    d = mux_dir()
    return _Daemon(as_endpoint(target), d).exit() if d is not None else False


PIPE_SIZE = 1 << 20  # the stdout pipe's capacity: the daemon's pump writes what the channel holds in one go


def widen(fd: int) -> None:
    """Give the pipe ``PIPE_SIZE`` (Linux; 64 KB by default): a download crossed it in 64 KB steps,
    each waking the daemon and this process once. Where the system refuses, the pipe stays as it is."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    except (ImportError, AttributeError, OSError):
        pass


class _MuxStream(PumpedStream):
    """A remote command whose pipes the daemon pumps; its exit status comes on the request socket."""

    def __init__(self, ctrl: socket.socket, stdin_w: int, stdout_r: int, stderr_r: int, buf: bytearray) -> None:
        self.ctrl, self._buf = ctrl, buf
        self._rc: int | None = None
        super().__init__(os.fdopen(stdin_w, "wb"), os.fdopen(stdout_r, "rb"),
                         lambda n: os.read(stderr_r, n), lambda: os.close(stderr_r))

    def _exit_status(self, timeout: float | None) -> int:
        if self._rc is None:
            self.ctrl.settimeout(timeout)
            try:
                doc = _read_line(self.ctrl, self._buf)
            except socket.timeout:
                raise TimeoutError("remote command did not finish") from None
            except (OSError, ValueError):
                doc = None
            rc = doc.get("rc") if doc else None  # the daemon's exit code: an int
            self._rc = int(rc) if isinstance(rc, (int, float, str)) else -1
        return self._rc

    def kill(self) -> None:
        try:
            self.ctrl.shutdown(socket.SHUT_RDWR)  # the daemon closes the channel
        except OSError:
            pass
        self.ctrl.close()
        for f in (self.stdin, self.stdout):
            try:
                f.close()
            except OSError:
                pass


class _Busy(Exception):
    """The server refused one more session on the kept connection (MaxSessions)."""


class MuxTransport(Transport):
    """A transport whose commands run over the daemon's connection to the host."""

    keeps_agent = True

    def __init__(self, ep: Endpoint, daemon: _Daemon) -> None:
        super().__init__(ep)
        self.daemon = daemon
        self._streams: weakref.WeakSet[_MuxStream] = weakref.WeakSet()
        self._direct: Transport | None = None

    def _exec(self, cmd: str) -> _MuxStream:
        for attempt in (0, 1):
            in_r, in_w = os.pipe()
            out_r, out_w = os.pipe()
            widen(out_r)
            err_r, err_w = os.pipe()
            try:
                ctrl = _request(self.daemon.path, {"op": "exec", "cmd": cmd}, [in_r, out_w, err_w])
            except OSError:
                ctrl = None
            finally:
                for fd in (in_r, out_w, err_w):
                    os.close(fd)
            doc, buf = None, bytearray()
            if ctrl is not None:
                try:
                    doc = _read_line(ctrl, buf)
                except (OSError, ValueError):
                    doc = None
            if doc and doc.get("started"):
                s = _MuxStream(ctrl, in_w, out_r, err_r, buf)  # type: ignore[arg-type]
                self._streams.add(s)
                return s
            for fd in (in_w, out_r, err_r):
                os.close(fd)
            if ctrl is not None:
                ctrl.close()
            if doc and doc.get("busy"):  # the server allows no more sessions on the kept connection
                raise _Busy()
            if doc and not doc.get("stale"):
                _raise_doc(doc)
            if attempt == 0 and self.daemon.ensure():  # the kept connection had died: open a fresh one
                continue
            raise ConnectError(f"the connection to {self.endpoint.address} dropped", "check the network and run the command again")
        raise AssertionError("unreachable")

    def run(self, cmd: str, input: bytes | None = None, timeout: float | None = None, limit: int | None = None) -> Result:
        try:
            s = self._exec(cmd)
        except _Busy:
            return self._direct_transport().run(cmd, input, timeout, limit)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            if input:
                threading.Thread(target=self._feed, args=(s, input), daemon=True).start()
            else:
                s.close_stdin()
            out = bytearray()
            fd = s.stdout.fileno()
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise ConnectError(f"{self.endpoint.address} did not answer a command within {timeout:.0f}s",
                                       "the instance may be overloaded or the link stalled: run the command again")
                r, _, _ = select.select([fd], [], [], left)
                if not r:
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                out += chunk
                if limit is not None and len(out) > limit:  # a hostile or broken host: stop reading now
                    raise replies.too_large(self.endpoint.name, limit)
            left = None if deadline is None else max(0.1, deadline - time.monotonic())
            try:
                rc = s.wait(left)
            except TimeoutError:
                raise ConnectError(f"{self.endpoint.address} did not answer a command within {timeout:.0f}s",
                                   "the instance may be overloaded or the link stalled: run the command again") from None
            return Result(rc, bytes(out), s.stderr_text().encode())
        finally:
            s.kill()

    @staticmethod
    def _feed(s: _MuxStream, data: bytes) -> None:
        try:
            s.stdin.write(data)
        except OSError:
            pass
        s.close_stdin()

    def stream(self, cmd: str) -> Stream:
        try:
            return self._exec(cmd)
        except _Busy:
            return self._direct_transport().stream(cmd)

    def serve_call(self, serve_cmd: str, argv: list[str], timeout: float | None = None,
                   input: bytes | None = None, limit: int | None = None) -> Result | None:
        """The verb in the daemon's kept ``serve`` process; None if that cannot be used now (the
        server refused one more session, the link was found dead). The daemon reads at most
        ``line_limit(limit)`` bytes of the answer line, and so does this process."""
        most = line_limit(limit)
        req: Request = {"op": "call", "serve": serve_cmd, "argv": argv, "timeout": timeout, "max": most,
                               "reply_max": limit or replies.DEFAULT_LIMIT}
        if input:
            req["input"] = base64.b64encode(input).decode()
        try:
            s = _request(self.daemon.path, req, timeout=None if timeout is None else timeout + 10)
        except OSError:
            return None
        try:
            doc = _read_line(s, most=most)
        except _TooLong:
            raise replies.too_large(self.endpoint.name, limit or most) from None
        except (OSError, ValueError):
            return None
        finally:
            s.close()
        if not doc or doc.get("stale") or doc.get("busy"):
            return None
        if "error" in doc:
            _raise_doc(doc)
        rc, out, err = doc.get("rc"), doc.get("out", ""), doc.get("err", "")
        if not (isinstance(rc, int) and isinstance(out, str) and isinstance(err, str)):
            raise replies.unreadable(self.endpoint.name, "a kept agent's answer without its exit code and output")
        return Result(rc, out.encode(), err.encode())

    def connect(self, port: int, host: str = "127.0.0.1") -> Tunnel:
        """A ``direct-tcpip`` channel on the daemon's connection, pumped into one end of a
        socket pair whose other end this process gets."""
        for attempt in (0, 1):
            mine, theirs = socket.socketpair()
            try:
                ctrl = _request(self.daemon.path, {"op": "tcp", "host": host, "port": port}, [theirs.fileno()])
                doc = _read_line(ctrl)
                ctrl.close()
            except (OSError, ValueError):
                doc = None
            finally:
                theirs.close()
            if doc and doc.get("opened"):
                return SocketTunnel(mine)
            mine.close()
            if doc and (doc.get("refused") or str(doc.get("error", "")).startswith("unknown request")):
                # refused by sshd, or a daemon of an older gpujob still holding the connection
                raise TunnelRefused(doc.get("error", f"the host refused a TCP channel to {host}:{port}"))
            if doc and not doc.get("stale"):
                _raise_doc(doc)
            if attempt == 0 and self.daemon.ensure():  # the kept connection had died: open a fresh one
                continue
        raise ConnectError(f"the connection to {self.endpoint.address} dropped", "check the network and run the command again")

    def _direct_transport(self) -> Transport:
        """A connection of this process's own (forwards; commands the server will not multiplex)."""
        if self._direct is None:
            from gpujob.transport.ssh import SSHTransport

            self._direct = SSHTransport(self.endpoint)
        return self._direct

    def forward(self, remote_port: int, local_port: int = 0, remote_host: str = "127.0.0.1") -> Forward:
        return self._direct_transport().forward(remote_port, local_port, remote_host)  # a long-lived forward

    def reset(self) -> None:
        """The link is believed dead (a probe failed): end the kept connection and every stream on it."""
        self.close()
        self.daemon.exit()

    def close(self) -> None:
        for s in list(self._streams):
            s.kill()
        if self._direct is not None:
            self._direct.close()
            self._direct = None


def warm_serve(target: Target, serve_cmd: str) -> None:
    """The daemon this process starts for ``target`` opens the agent's ``serve`` at once, so the
    next command's quick verb does not wait for a login shell and a Python start there."""
    daemon = _daemon_for(target)
    if daemon is None:
        return
    with _to_start_lock:
        pending = _to_start.get(daemon.path)
        if pending is not None:
            pending.warm = serve_cmd


def describe_error(e: BaseException) -> Mapping[str, object]:
    """How the daemon reports an error to the client (message, remedy and class name)."""
    if isinstance(e, GpujobError):
        return e.to_json()
    return {"error": f"{type(e).__name__}: {e}", "remedy": "run the command again", "kind": "ConnectError"}
