"""Errors a user can cause: each names the cause and the next step."""

from __future__ import annotations

from typing import Any


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


class JobNotFound(RemoteError):
    """No job matches the id or prefix given (the host that was searched is named)."""


class JobAmbiguous(GpujobError):
    """The id prefix or name matches jobs on several hosts: gpujob does not guess (``--host`` picks one)."""


class Interrupted(GpujobError, KeyboardInterrupt):
    """Ctrl-C, with the state things were left in (still a ``KeyboardInterrupt`` for a notebook)."""

    exit_code = 130


class InternalError(GpujobError):
    """Something gpujob did not foresee: a bug to report, shown as one paragraph (GPUJOB_DEBUG=1: the traceback)."""

    exit_code = 70  # EX_SOFTWARE


def unexpected(e: BaseException) -> GpujobError:
    """The error the CLI prints for an exception that is not a ``GpujobError``.

    What the user's machine causes (a file that cannot be read or written, a full disk) names the
    file and the next step; anything else is a bug: its type and message, and how to see more."""
    import errno

    if isinstance(e, OSError) and e.errno is not None:
        where = f" ({e.filename})" if e.filename else ""
        if e.errno == errno.ENOSPC:
            return GpujobError(f"no space left on this machine{where}", "free some space (df -h shows where), then run the command again")
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return GpujobError(f"not allowed: {e.strerror}{where}", "check the permissions of that path, then run the command again")
        return GpujobError(f"{e.strerror or e}{where}", "check that path, then run the command again")
    if isinstance(e, MemoryError):
        return GpujobError("out of memory on this machine", "close other programs or give a smaller input, then run it again")
    return InternalError(f"internal error: {type(e).__name__}: {str(e)[:300]}",
                         "this is a bug in gpujob: run the command again with GPUJOB_DEBUG=1 to see the traceback, and report it")


def link_cut(host: Any, action: str, rc: int, again: str) -> GpujobError:
    """The error for a transfer whose other end never reported back (no exit status: ``rc`` < 0).

    Whatever the remote command wrote to stderr before the cut (a login shell's noise) is not the
    cause, so it is not shown."""
    if getattr(host, "kind", "") == "local":
        return RemoteError(f"the {action} on this machine was interrupted: its process was killed (signal {-rc})", again)
    # the link, not the user (exit 3): a script, or ``pull --follow``, tells it from a refusal
    return ConnectError(f"the link to {host.name} was cut during the {action}: the instance never reported back", again)
