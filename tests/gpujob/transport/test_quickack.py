"""The SSH connection's socket acknowledges at once after each exchange (issue 38): without it, a
reply sshd writes in two segments waits up to 40 ms for Linux's delayed acknowledgement, which held
every first command's channel open for 42-50 ms. Read from the kernel (``TCP_QUICKACK``'s state
after each request and reply over a real loopback TCP connection), with the plain socket as the
control that shows the kernel leaving quick-ack mode."""

from __future__ import annotations

import socket

import pytest

from gpujob.transport.ssh import _QuickAck

pytestmark = pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="TCP_QUICKACK is Linux's")


def _exchanges(wrap: bool, rounds: int = 20, into: bool = False) -> list[int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    client = socket.create_connection(srv.getsockname())
    peer, _ = srv.accept()
    try:
        for s in (client, peer):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ours = _QuickAck(client) if wrap else client
        states = []
        for _ in range(rounds):  # a request and its reply, as a command's messages go
            ours.sendall(b"q" * 64)
            assert peer.recv(64)
            peer.sendall(b"r" * 64)
            assert ours.recv_into(bytearray(64), 64) if into else ours.recv(64)
            states.append(client.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK))
        return states
    finally:
        for s in (client, peer, srv):
            s.close()


def test_each_reply_is_acknowledged_at_once() -> None:
    assert _exchanges(wrap=True) == [1] * 20
    assert _exchanges(wrap=True, into=True) == [1] * 20  # a reader that fills its own buffer, too


def test_the_plain_socket_falls_back_to_delayed_acknowledgements() -> None:
    """The control: the kernel does leave quick-ack mode in such an exchange (else the test above proves nothing)."""
    assert 0 in _exchanges(wrap=False)


def test_the_wrapped_socket_is_what_paramiko_reads() -> None:
    from gpujob.transport.ssh import gcm_first

    a, b = socket.socketpair(socket.AF_UNIX)  # no TCP: no wrapper (nothing to acknowledge)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    tcp = socket.create_connection(srv.getsockname())
    try:
        assert isinstance(gcm_first(tcp).sock, _QuickAck)
        assert not isinstance(gcm_first(a).sock, _QuickAck)
    finally:
        for s in (a, b, tcp, srv):
            s.close()
