"""paramiko's packet reader reading ahead (gpujob/transport/readahead.py): what it hands out is
the socket's bytes exactly, in any split, and a packet length past any real one is refused
before anything is allocated for it. (Every SSH test reads through it as well.)"""

from __future__ import annotations

import socket
import threading

import pytest


def test_reads_are_the_socket_bytes_in_any_split_and_a_forged_length_is_refused() -> None:
    import paramiko

    from gpujob.transport.readahead import AHEAD, MOST, ReadAheadPacketizer

    a, b = socket.socketpair()
    try:
        reader = ReadAheadPacketizer(a)
        data = bytes(range(256)) * (3 * AHEAD // 256) + b"end"  # three read-ahead buffers and a bit
        threading.Thread(target=b.sendall, args=(data,), daemon=True).start()
        sizes = [16, 32768 - 16, 5, AHEAD + 7, 1, 777, 2 * AHEAD // 3]  # a header block, a packet's rest, ...
        got, i = [], 0
        while sum(map(len, got)) < len(data):
            n = min(sizes[i % len(sizes)], len(data) - sum(map(len, got)))
            got.append(reader.read_all(n))
            assert len(got[-1]) == n
            i += 1
        assert b"".join(got) == data
        with pytest.raises(paramiko.SSHException, match="refusing"):
            reader.read_all(MOST + 1)
    finally:
        a.close()
        b.close()
