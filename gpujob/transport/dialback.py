"""Channels the host opens back to the laptop (SSH ``tcpip-forward``), for a ranged upload.

A channel the laptop opens to a port on the host (``direct-tcpip``) costs a round trip before
its first byte, and it can only be asked for once the process listening there has said where
(its exec, the login shell and Python start: ~0.3 s before that line). Here the laptop asks
sshd, beside that exec, to listen on a port of the host's loopback for it; the process, once
started, connects there as many times as it is told, and each connection reaches the laptop as
a ``forwarded-tcpip`` channel already open when it arrives, and the laptop writes its data at
once (remote/stream/rangeserve.py ``serve``, ``dial_request``).

Anyone on the host may connect to that port: a channel counts only when its origin (the
address and port sshd says it came from) is one the process named on its stdout, the
encrypted exec channel (no other socket can have that origin while ours is open); the others
are closed unread. Where sshd refuses the forward (``AllowTcpForwarding`` no or
local), or the connection is not paramiko's own (the multiplexer's daemon), ``start`` gives
None and the caller opens its channels itself.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import paramiko

from gpujob.transport.base import Tunnel
from gpujob.transport.ssh import ChannelTunnel

ARRIVED_MAX = 64  # channels kept waiting to be taken; a flood past this is closed


class DialBack:
    """One forwarded port for one sync's range server; ``take`` gives the channels it dialled."""

    def __init__(self, tr: paramiko.Transport) -> None:
        self.tr = tr
        self.port: int | None = None
        self.asked = 0  # channels the server was asked to dial and not taken yet
        self.arrived: queue.Queue = queue.Queue()
        self.theirs: set[tuple[str, int]] = set()  # origins the server said its connections have
        self.heard = False  # the server has said: any other origin is a stranger's
        self.told = threading.Condition()

    @classmethod
    def open(cls, t: Any, quiet: float = 5.0) -> DialBack | None:
        """Ask sshd to forward a port of the host's loopback to this connection (None when it
        refuses or the connection is not paramiko's own). Its round trip is measured as the one
        ``ranges.measured_rtt`` asks for (paramiko keeps one global request's answer at a time:
        the login's probe is let finish first, so each answer goes to its own request)."""
        client = getattr(t, "client", None)
        tr = client.get_transport() if client is not None else None
        if tr is None or not tr.is_active():
            return None
        deadline = time.monotonic() + quiet
        while getattr(tr, "completion_event", None) is not None and not tr.completion_event.is_set() \
                and time.monotonic() < deadline:
            time.sleep(0.005)
        me = cls(tr)
        began = time.monotonic()
        try:
            port = tr.request_port_forward("127.0.0.1", 0, me._arrive)
        except (paramiko.SSHException, EOFError, OSError):
            port = None  # refused (an answer all the same) or the link is gone
        if tr.is_active():  # an answer came: a round trip, whichever
            rtt = time.monotonic() - began
            tr.gpujob_rtt = min(rtt, getattr(tr, "gpujob_rtt", rtt))  # type: ignore[attr-defined]
            tr.gpujob_rtt_again = True  # type: ignore[attr-defined]
        if not isinstance(port, int) or not 0 < port < 65536:
            me.close()
            return None
        me.port = port
        return me

    def _arrive(self, chan: paramiko.Channel, origin: Any, server: Any) -> None:
        """paramiko's transport thread: keep the channel for ``take`` (no I/O here)."""
        if self.arrived.qsize() >= ARRIVED_MAX:
            threading.Thread(target=chan.close, name="gpujob-dial-drop", daemon=True).start()
            return
        self.arrived.put((chan, (str(origin[0]), int(origin[1]))))

    def ask(self, n: int) -> dict[str, int | None]:
        """The control line asking the server for ``n`` channels (what it reads on its stdin)."""
        with self.told:
            self.asked += n
        return {"dial": self.port, "n": n}

    def dialled(self, origins: Any) -> None:
        """The server's word on where its connections come from (``{"dialled": [[addr, port], ...]}``)."""
        with self.told:
            for o in origins if isinstance(origins, list) else []:
                if isinstance(o, list) and len(o) == 2 and isinstance(o[0], str) and isinstance(o[1], int):
                    self.theirs.add((o[0], o[1]))
            self.heard = True
            self.told.notify_all()

    def take(self, wait: float) -> Tunnel | None:
        """A channel the server dialled, known by its origin; None when none was asked for or
        none came within ``wait`` seconds (the caller then opens one itself)."""
        with self.told:
            if self.asked <= 0:
                return None
            self.asked -= 1
        deadline = time.monotonic() + wait
        while True:
            try:
                chan, origin = self.arrived.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            with self.told:  # the origins come on the server's stdout, beside the channels
                while origin not in self.theirs and not self.heard and \
                        self.told.wait(max(0.0, deadline - time.monotonic())):
                    pass
                ours = origin in self.theirs
                self.theirs.discard(origin)
            if ours:
                return ChannelTunnel(chan)
            chan.close()  # not our server's: another process on the host found the port

    def close(self) -> None:
        """Stop the forward (no answer awaited) and close the channels nobody took."""
        try:
            self.tr._tcp_handler = None  # type: ignore[attr-defined]  # private: not in paramiko's stub (pyproject pins the paramiko tested)
            if self.port is not None and self.tr.is_active():
                self.tr.global_request("cancel-tcpip-forward", ("127.0.0.1", self.port), wait=False)
        except (paramiko.SSHException, EOFError, OSError):
            pass
        while True:
            try:
                self.arrived.get_nowait()[0].close()
            except queue.Empty:
                return
            except (paramiko.SSHException, EOFError, OSError):
                continue
