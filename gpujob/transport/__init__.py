"""How the laptop reaches a host: one small interface (``base``) and three ways to carry it.

``local`` runs commands on this machine; ``mux`` hands them to a per-host daemon (``muxd``) that
keeps one SSH connection open; ``ssh`` opens a connection of its own. ``agent`` speaks the agent
protocol over any of them. Everything here reads an ``Endpoint``, never a host profile.
"""

from __future__ import annotations

from gpujob.transport.base import Result, Stream, Transport
from gpujob.transport.endpoint import Endpoint, Target, as_endpoint


def connect(target: Target) -> Transport:
    """A transport for ``target`` (an ``Endpoint``, or a profile that makes one): ``LocalTransport``
    for ``local``; for SSH the multiplexer's kept connection (``gpujob.transport.mux``), else a
    connection of its own (``SSHTransport``), with the daemon started in the background for the
    commands that follow."""
    ep = as_endpoint(target)
    if ep.is_local:
        from gpujob.transport.local import LocalTransport

        return LocalTransport(ep)
    from gpujob.transport import mux

    t = mux.connect(ep)
    if t is not None:
        return t
    from gpujob.transport.ssh import SSHTransport

    own = SSHTransport(ep)  # the first command answers from its own connection: no wait for a daemon
    mux.start_in_background(ep)
    return own


__all__ = ["Endpoint", "Result", "Stream", "Transport", "connect"]
