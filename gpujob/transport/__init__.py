"""How the laptop talks to a host: one small interface, two implementations."""

from __future__ import annotations

from gpujob.config.hosts import LOCAL, Host
from gpujob.transport.base import Result, Stream, Transport


def connect(host: Host) -> Transport:
    """A transport for ``host``: ``LocalTransport`` for ``local``; for SSH the multiplexer's
    kept connection (``gpujob.transport.mux``), else a connection of its own (``SSHTransport``)."""
    if host.kind == LOCAL:
        from gpujob.transport.local import LocalTransport

        return LocalTransport(host)
    from gpujob.transport import mux

    t = mux.connect(host)
    if t is not None:
        return t
    from gpujob.transport.ssh import SSHTransport

    return SSHTransport(host)


__all__ = ["Result", "Stream", "Transport", "connect"]
