"""A key login one round trip shorter: the signed ``publickey`` request right behind the
``ssh-userauth`` service request, instead of after the server's accept.

paramiko (like OpenSSH's client) sends ``SERVICE_REQUEST``, waits for ``SERVICE_ACCEPT``, then
sends the key's signed ``USERAUTH_REQUEST``. The signature needs only the session id, which the
key exchange already gave; the accept carries nothing. sshd reads its packets in order and
installs the userauth handler as it accepts the service, so a request queued behind the service
request is read by it: one round trip less on every fresh connection (0.15 s at 150 ms).

Pipelined only where nothing waits on the server's answer: a key whose signature algorithm is
its own type (Ed25519, ECDSA; gpujob's own key is Ed25519). An RSA key picks its SHA-2 algorithm
from the server's ``server-sig-algs`` (the EXT_INFO after the key exchange) and keeps paramiko's
order. ``GPUJOB_SSH_PIPELINE_AUTH=0`` turns it off (a server that wants the accept first).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

# isort: off
import gpujob.transport.paramiko_load  # noqa: F401  (first: paramiko without invoke and importlib.metadata)
import paramiko
from paramiko.auth_handler import AuthHandler
from paramiko.message import Message
# isort: on

from gpujob.transport.login import SecondFactorAsked, check_full


def pipelines(key: Any) -> bool:
    """Whether a login with ``key`` can go without waiting for the service's accept."""
    if os.environ.get("GPUJOB_SSH_PIPELINE_AUTH", "1") == "0":
        return False
    try:
        name = key.get_name()
    except (AttributeError, paramiko.SSHException):
        return False
    return "rsa" not in name and not name.endswith("-cert-v01@openssh.com")


if TYPE_CHECKING:
    class _AuthHandler(AuthHandler):
        """AuthHandler with the private steps paramiko's stub leaves out (paramiko/auth_handler.py, 3.4 to 5.x)."""

        def _request_auth(self) -> None: ...

        def _parse_service_accept(self, m: Message) -> None: ...
else:
    _AuthHandler = AuthHandler


class PipelinedAuth(_AuthHandler):
    """paramiko's client AuthHandler that sends the publickey request with the service request
    (made by ``PipelinedTransport`` only for a key that ``pipelines``)."""

    def _request_auth(self) -> None:
        super()._request_auth()
        accept = Message()
        accept.add_string("ssh-userauth")
        accept.rewind()
        super()._parse_service_accept(accept)  # builds, signs and sends the request now

    def _parse_service_accept(self, m: Message) -> None:
        """The accept of the request already sent: nothing is left to do."""


class PipelinedTransport(paramiko.Transport):
    """paramiko's transport whose key logins use ``PipelinedAuth``; the rest is paramiko's. A partial
    success (the server asks for a second factor) ends the login (``login.SecondFactorAsked``):
    paramiko's client would prompt on the terminal and report the prompt's failure as a refused key."""

    active: bool  # paramiko's own (not in its stub): the transport's thread runs

    def auth_publickey(self, username: str, key: paramiko.PKey, event: threading.Event | None = None) -> list[str]:
        if not pipelines(key):
            return check_full(super().auth_publickey(username, key, event))
        if not self.active or not self.initial_kex_done:  # as paramiko: never on an unsecured link
            raise paramiko.SSHException("No existing session")
        done = event or threading.Event()
        self.auth_handler = PipelinedAuth(self)
        self.auth_handler.auth_publickey(username, key, done)
        return [] if event is not None else check_full(self.auth_handler.wait_for_response(done))

    def auth_password(self, username: str, password: str, event: threading.Event | None = None,
                      fallback: bool = True) -> list[str]:
        return check_full(super().auth_password(username, password, event, fallback))

    def auth_interactive_dumb(self, username: str, handler: Any = None, submethods: str = "") -> list[str]:
        """Never a prompt on gpujob's terminal (or in the kept connection's daemon)."""
        raise SecondFactorAsked(["keyboard-interactive"])
