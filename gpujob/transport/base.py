"""The transport interface: run a command, open a streaming command, forward a port, close.

Every stream reads the same way (``PumpedStream``): its stdout reads as a buffered reader
(``read``, ``read1``, ``readline``) and a thread pumps its stderr into a buffer, whether the bytes
come from a local process or the multiplexer's daemon (a pipe; the daemon fills it with ``pump``)
or a paramiko channel read in the reading thread itself (``chanbuf.ChannelReader``).
"""

from __future__ import annotations

import abc
import os
import socket
import threading
from dataclasses import dataclass
from typing import IO, Callable

from gpujob.transport.endpoint import Endpoint, Target, as_endpoint

CHUNK = 65536
STDERR_KEPT = 64 << 10  # the end of a command's stderr kept (it says why); a flood is not
PUMP_READ = 1 << 20  # what one pump step takes at most: all a channel holds, in one write (not 64 KB steps)


@dataclass
class Result:
    """What a finished command left: exit status and its two outputs."""

    rc: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")


def pump(read: Callable[[int], bytes], fd: int, broken: Callable[[], None]) -> None:
    """Copy ``read``'s chunks into the pipe ``fd`` until ``read`` gives b"", then close ``fd``.
    The pipe's reader gone (or the source failing) calls ``broken`` (which closes the source)."""
    try:
        while True:
            data = read(PUMP_READ)
            if not data:
                break
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
    except (OSError, EOFError):
        broken()
    finally:
        os.close(fd)


class Stream(abc.ABC):
    """A running command whose stdin and stdout are byte streams."""

    stdin: IO[bytes]
    stdout: IO[bytes]  # reads as a buffered reader: read, readline, read1

    def close_stdin(self) -> None:
        """Send EOF to the command (here: close its stdin pipe)."""
        try:
            self.stdin.close()
        except OSError:
            pass

    def read_some(self, n: int = CHUNK) -> bytes:
        """The bytes that have arrived (at most ``n``), waiting only until the first is there;
        b"" at the end. (``stdout.read(n)`` waits for all ``n``: a log line would sit unseen.)"""
        return self.stdout.read1(n)  # type: ignore[attr-defined]

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> int:
        """Wait for the command's exit status (negative: the link went down before it came)."""

    @abc.abstractmethod
    def stderr_text(self) -> str:
        """What the command wrote to stderr (read after ``wait``)."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Abandon the command (closing the channel or killing the process)."""

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


class PumpedStream(Stream):
    """A stream whose stderr a thread pumps into a buffer (so the command never blocks on a
    full stderr pipe). Subclasses say where stderr comes from and how the exit status arrives."""

    def __init__(self, stdin: IO[bytes], stdout: IO[bytes], read_err: Callable[[int], bytes],
                 err_done: Callable[[], None] | None = None) -> None:
        self.stdin, self.stdout = stdin, stdout
        self._err = bytearray()
        self._err_pump = threading.Thread(target=self._drain, args=(read_err, err_done), name="gpujob-stderr", daemon=True)
        self._err_pump.start()

    def _drain(self, read: Callable[[int], bytes], done: Callable[[], None] | None) -> None:
        try:
            for chunk in iter(lambda: read(CHUNK), b""):
                self._err += chunk
                del self._err[:-STDERR_KEPT]  # the end says why; a hostile host's flood is not kept
        except (OSError, EOFError, ValueError):
            pass
        finally:
            if done is not None:
                done()

    @abc.abstractmethod
    def _exit_status(self, timeout: float | None) -> int:
        """The command's exit status, waiting at most ``timeout`` (``TimeoutError`` after)."""

    def wait(self, timeout: float | None = None) -> int:
        rc = self._exit_status(timeout)
        self._err_pump.join(5)
        return rc

    def stderr_text(self) -> str:
        return self._err.decode("utf-8", "replace")


class Forward(abc.ABC):
    """A local port whose connections reach a port on the host."""

    local_port: int

    @abc.abstractmethod
    def close(self) -> None:
        """Stop listening and close every forwarded connection."""


class TunnelRefused(OSError):
    """The host's sshd would not open a TCP channel (``AllowTcpForwarding no``, nothing listening)."""


class Tunnel(abc.ABC):
    """A byte stream to a port on the host, over the transport's own connection."""

    rfile: IO[bytes]  # readline, read
    wfile: IO[bytes]

    @abc.abstractmethod
    def close_write(self) -> None:
        """Send EOF (the peer reads b""), keep reading."""

    @abc.abstractmethod
    def settimeout(self, seconds: float | None) -> None:
        """Reads wait at most this long (``socket.timeout`` after)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Drop the stream both ways."""


class SocketTunnel(Tunnel):
    """A tunnel that is a local socket (a TCP connection, or the end of a pair a daemon pumps)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rfile, self.wfile = sock.makefile("rb"), sock.makefile("wb")

    def close_write(self) -> None:
        try:
            self.wfile.flush()
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def settimeout(self, seconds: float | None) -> None:
        self.sock.settimeout(seconds)

    def close(self) -> None:
        for f in (self.wfile, self.rfile):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # a reader blocked in another thread wakes
        except OSError:
            pass
        self.sock.close()


class Transport(abc.ABC):
    """One connection to a host. Everything above speaks only to this."""

    keeps_agent = False  # whether ``serve_call`` can answer (a kept ``serve`` process on the host)
    gpujob_rtt: float | None  # a kept connection's round trip, set once asked (usecases/ranges.measured_rtt)

    def __init__(self, target: Target) -> None:
        self.endpoint: Endpoint = as_endpoint(target)

    @abc.abstractmethod
    def run(self, cmd: str, input: bytes | None = None, timeout: float | None = None, limit: int | None = None) -> Result:
        """Run a shell command to completion; more than ``limit`` bytes of stdout raise
        ``replies.UnreadableReply`` as soon as they arrive (the command is ended)."""

    @abc.abstractmethod
    def stream(self, cmd: str) -> Stream:
        """Start a shell command with streaming stdin/stdout."""

    @abc.abstractmethod
    def forward(self, remote_port: int, local_port: int = 0, remote_host: str = "127.0.0.1") -> Forward:
        """Listen on 127.0.0.1:local_port (0 = any free) and forward to remote_host:remote_port."""

    @abc.abstractmethod
    def connect(self, port: int, host: str = "127.0.0.1") -> Tunnel:
        """A byte stream to ``host:port`` as the host sees it, over this connection (an SSH
        ``direct-tcpip`` channel: no shell, no process started there). ``TunnelRefused`` when
        the host's sshd will not open one."""

    def serve_call(self, serve_cmd: str, argv: list[str], timeout: float | None = None,
                   input: bytes | None = None, limit: int | None = None) -> Result | None:
        """Run a quick agent verb in a kept ``serve`` process started by ``serve_cmd`` (``input``:
        its stdin; ``limit``: as ``run``'s). None when there is none to use: the caller runs the verb as a command."""
        return None

    def close(self) -> None:  # noqa: B027 - a transport may have nothing to release
        """Release the connection."""

    def reset(self) -> None:
        """The link is believed dead (a probe failed): drop it, and any kept connection with it."""
        self.close()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
