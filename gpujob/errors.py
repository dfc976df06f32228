"""Errors a user can cause: each names the cause and the next step."""

from __future__ import annotations


class GpujobError(Exception):
    """A failure with a cause and a remedy, printed without a traceback by the CLI."""

    exit_code = 2

    def __init__(self, cause: str, remedy: str = "") -> None:
        super().__init__(cause)
        self.cause = cause
        self.remedy = remedy

    def __str__(self) -> str:
        return f"{self.cause}\n  → {self.remedy}" if self.remedy else self.cause

    def to_json(self) -> dict:
        return {"error": self.cause, "remedy": self.remedy, "kind": type(self).__name__}


class SpecError(GpujobError):
    """The job YAML is malformed or has a wrong key or value."""


class HostError(GpujobError):
    """A host profile is missing or wrong."""


class ConnectError(GpujobError):
    """The instance could not be reached or refused us."""

    exit_code = 3


class HostKeyChanged(ConnectError):
    """The instance's host key differs from the one recorded."""


class RemoteError(GpujobError):
    """The agent on the instance reported a failure."""


class JobNotFound(GpujobError):
    """No job matches the id or prefix given."""
