"""``LocalTransport``: the ``local`` host, commands run by ``/bin/sh`` on this machine."""

from __future__ import annotations

import io
import socket
import subprocess

from gpujob.transport import base
from gpujob.transport.base import Forward, PumpedStream, Result, Stream, Transport


class _LocalStream(PumpedStream):
    def __init__(self, cmd: str) -> None:
        self.proc = subprocess.Popen(
            ["/bin/sh", "-c", cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert self.proc.stdin and self.proc.stdout and isinstance(self.proc.stderr, io.BufferedReader)  # (PIPE: buffered)
        super().__init__(self.proc.stdin, self.proc.stdout, self.proc.stderr.read1)

    def _exit_status(self, timeout: float | None) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError("the command did not finish") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class _NoForward(Forward):
    """On this machine the port is already local."""

    def __init__(self, port: int) -> None:
        self.local_port = port

    def close(self) -> None:
        pass


class LocalTransport(Transport):
    """Runs commands with ``/bin/sh -c`` locally."""

    def run(self, cmd: str, input: bytes | None = None, timeout: float | None = None, limit: int | None = None) -> Result:
        # this machine's own agent: no one else's reply to bound (``limit`` is for a rented host)
        p = subprocess.run(["/bin/sh", "-c", cmd], input=input or b"", capture_output=True, timeout=timeout)
        return Result(p.returncode, p.stdout, p.stderr)

    def stream(self, cmd: str) -> Stream:
        return _LocalStream(cmd)

    def forward(self, remote_port: int, local_port: int = 0, remote_host: str = "127.0.0.1") -> Forward:
        return _NoForward(remote_port)

    def connect(self, port: int, host: str = "127.0.0.1") -> base.Tunnel:
        try:
            sock = socket.create_connection((host, port), timeout=30)
        except OSError as e:
            raise base.TunnelRefused(f"nothing answers on {host}:{port}: {e}") from None
        sock.settimeout(None)
        return base.SocketTunnel(sock)
