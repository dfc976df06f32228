"""paramiko's packet reader, reading the socket ahead: one ``recv_into`` for many packets.

paramiko's ``Packetizer.read_all`` asks the socket for exactly what it needs next: a packet's
first block, then its rest, so two system calls (each releasing and retaking the GIL) and a
concatenation for every 32 KB packet a download brings. This one keeps what the socket holds
(up to ``AHEAD`` bytes) in a buffer and hands each read out of it; everything else (the
timeouts, a closed transport, the re-key check, keepalives) is paramiko's loop as it is.
The bytes buffered are the raw ones off the wire: decryption stays in ``read_message``, so a
key change between two buffered packets is no concern.
"""

from __future__ import annotations

import errno
import socket
from typing import TYPE_CHECKING

# isort: off
import gpujob.transport.paramiko_load  # noqa: F401  (first: paramiko without invoke and importlib.metadata)
from paramiko.packet import NeedRekeyException, Packetizer
from paramiko.ssh_exception import SSHException
# isort: on

AHEAD = 1 << 18  # bytes one read of the socket may take
MOST = 16 << 20  # the largest packet taken (OpenSSH sends at most 256 KB): a forged length is refused, not allocated


class ReadAheadPacketizer(Packetizer):
    """``Packetizer`` with ``read_all`` served from a buffer the socket is read into."""

    # Packetizer's private state and keepalive, which paramiko's stub leaves out (paramiko/packet.py, 3.4 to 5.x)
    _Packetizer__remainder: bytes
    _Packetizer__socket: socket.socket
    _Packetizer__closed: bool
    _Packetizer__need_rekey: bool
    if TYPE_CHECKING:
        def _check_keepalive(self) -> None: ...

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self._ahead = bytearray(AHEAD)
        self._lo = self._hi = 0  # the unread bytes are _ahead[_lo:_hi]

    def read_all(self, n: int, check_rekey: bool = False) -> bytes:
        if n > MOST:
            raise SSHException(f"refusing a {n:,}-byte SSH packet (more than {MOST:,})")
        # paramiko keeps its state in name-mangled attributes: ``self.__x`` there is this
        rest = self._Packetizer__remainder  # what reading the banner line read past it
        if rest:
            self._Packetizer__remainder = b""
            self._room(self._hi - self._lo + len(rest))
            self._ahead[self._hi:self._hi + len(rest)] = rest
            self._hi += len(rest)
        while self._hi - self._lo < n:
            self._room(n)
            timed_out = False
            if self.handshake_timed_out():
                raise EOFError()
            try:
                with memoryview(self._ahead) as view:
                    got = self._Packetizer__socket.recv_into(view[self._hi:])
                if not got:
                    raise EOFError()
                self._hi += got
            except socket.timeout:
                timed_out = True
            except OSError as e:
                if e.errno == errno.EAGAIN:
                    timed_out = True
                elif self._Packetizer__closed:
                    raise EOFError() from None
                else:
                    raise
            if timed_out:
                if self._Packetizer__closed:
                    raise EOFError()
                if check_rekey and self._hi == self._lo and self._Packetizer__need_rekey:
                    raise NeedRekeyException()
                self._check_keepalive()
        with memoryview(self._ahead) as view:
            out = bytes(view[self._lo:self._lo + n])
        self._lo += n
        if self._lo == self._hi:
            self._lo = self._hi = 0
        return out

    def _room(self, n: int) -> None:
        """Free space after the unread bytes, and room for ``n`` bytes from their start."""
        size = len(self._ahead)
        if self._lo and (size - self._hi < AHEAD // 4 or size - self._lo < n):  # the unread bytes to the front
            held = self._hi - self._lo
            self._ahead[:held] = self._ahead[self._lo:self._hi]
            self._lo, self._hi = 0, held
        if size - self._lo < n or size - self._hi < 1:
            self._ahead.extend(bytes(max(n - (size - self._lo), AHEAD // 4)))
