"""The transport interface: run a command, open a streaming command, forward a port, close."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import IO

from gpujob.config.hosts import Host


@dataclass
class Result:
    """What a finished command left: exit status and its two outputs."""

    rc: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")


class Stream(abc.ABC):
    """A running command whose stdin and stdout are byte streams."""

    stdin: IO[bytes]
    stdout: IO[bytes]

    def close_stdin(self) -> None:
        """Send EOF to the command (here: close its stdin pipe)."""
        try:
            self.stdin.close()
        except OSError:
            pass

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> int:
        """Wait for the command's exit status."""

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


class Forward(abc.ABC):
    """A local port whose connections reach a port on the host."""

    local_port: int

    @abc.abstractmethod
    def close(self) -> None:
        """Stop listening and close every forwarded connection."""


class Transport(abc.ABC):
    """One connection to a host. Everything above speaks only to this."""

    def __init__(self, host: Host) -> None:
        self.host = host

    @abc.abstractmethod
    def run(self, cmd: str, input: bytes | None = None, timeout: float | None = None) -> Result:
        """Run a shell command to completion."""

    @abc.abstractmethod
    def stream(self, cmd: str) -> Stream:
        """Start a shell command with streaming stdin/stdout."""

    @abc.abstractmethod
    def forward(self, remote_port: int, local_port: int = 0, remote_host: str = "127.0.0.1") -> Forward:
        """Listen on 127.0.0.1:local_port (0 = any free) and forward to remote_host:remote_port."""

    def close(self) -> None:  # noqa: B027 - a transport may have nothing to release
        """Release the connection."""

    def reset(self) -> None:
        """The link is believed dead (a probe failed): drop it, and any kept connection with it."""
        self.close()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
