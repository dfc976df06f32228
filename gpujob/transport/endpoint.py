"""``Endpoint``: everything the transport needs to reach one host, as a plain value.

Host profiles (``gpujob.config.hosts``) build it (``Host.endpoint()``); the transport reads
nothing else, so it never imports the configuration layer. The multiplexer's daemon gets the
same value on its stdin (``to_json``) instead of reading the profile store again.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol, Union

from gpujob.jsontypes import JSONObject

LOCAL = "local"  # the kind of the host that is this machine
SSH = "ssh"


@dataclass(frozen=True)
class Endpoint:
    """How to reach a host and where its agent lives. No jump host or proxy: none is supported."""

    name: str  # the profile's name, for messages
    kind: str = SSH  # ``ssh`` or ``local``
    hostname: str = ""
    port: int = 22
    user: str = "root"
    identity_file: str | None = None  # the profile's own key; None: gpujob's key (``client_key``)
    client_key: str = ""  # gpujob's own key file (made by the configuration layer before use)
    known_hosts: str = ""  # host keys recorded here (trust on first use, a changed key refused)
    connect_timeout: float = 15.0
    root: str = "~/.gpujob"  # the agent's folder on the host (``~`` expands there)
    agent_python: str | None = None  # the interpreter the agent uses; None = search the usual places

    @property
    def is_local(self) -> bool:
        return self.kind == LOCAL

    @property
    def address(self) -> str:
        return "this machine" if self.is_local else f"{self.user}@{self.hostname}:{self.port}"

    def to_json(self) -> JSONObject:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Endpoint:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in known})


class Reachable(Protocol):
    """What the layers above hand the transport: a host profile that can say how to reach it."""

    name: str

    @property
    def address(self) -> str: ...  # where it is, for messages

    def endpoint(self) -> Endpoint: ...


Target = Union[Endpoint, Reachable]


def as_endpoint(target: Target) -> Endpoint:
    """``target`` itself, or the endpoint of the profile given."""
    return target if isinstance(target, Endpoint) else target.endpoint()


def identity_problem(path: str) -> str:
    """Why ``path`` cannot be the private key a profile logs in with, or "" (read before any
    connection: a wrong path once read as "the instance did not answer")."""
    p = os.path.expanduser(path)
    if not os.path.exists(p):
        return f"the key file {path} does not exist"
    if os.path.isdir(p):
        return f"the key file {path} is a folder"
    try:
        with open(p, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        return f"the key file {path} cannot be read ({e.strerror or e})"
    if b"PRIVATE KEY" not in head:
        public = b"ssh-" in head[:20] or path.endswith(".pub")
        return f"{path} is not a private key" + (" (it is the public half: give the file without .pub)" if public else "")
    return ""
