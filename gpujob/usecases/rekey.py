"""``gpujob host rekey NAME|--all``: give a profile a new key of its own and take the old one off its host.

Profiles made before per-profile keys log in with gpujob's shared key, authorized on every
instance the user rented, so one provider could log into the others (docs/security.md). The
steps, each verified before the next, so that a host not reached or not verified is left as
it was: over the current login, add the new key's line where the old key's line is; log in
afresh with ONLY the new key and, over that login, remove the old key's line (and the shared
key's) and only those lines; then the profile takes the new key. Until that last step the new
key is a pending file (``keys.pending_key_path``); a failure takes its line off the host again."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpujob.config import keys
from gpujob.config.hosts import LOCAL, Host, HostStore
from gpujob.errors import ConnectError, GpujobError, HostError


def _blob(path: Path) -> str:
    """The key's public blob: from its .pub, else from the private key (a .pub deleted by hand)."""
    try:
        words = keys.pub_path(path).read_text().split()
        return words[1] if len(words) > 1 else ""
    except OSError:
        import paramiko

        try:
            return paramiko.Ed25519Key.from_private_key_file(str(path)).get_base64()
        except (OSError, paramiko.SSHException):
            return ""  # no key file at all: the login with it was refused before this


def _line(path: Path) -> str:
    return keys.pub_path(path).read_text().strip()


def _agent(host: Host, key: Path | None = None) -> Any:
    """An agent over a connection of its own (never the kept one): with ``key``, that key alone."""
    from gpujob.transport.agent import Agent
    from gpujob.transport.ssh import SSHTransport

    ep = host.endpoint() if key is None else replace(host.endpoint(), client_key=str(key))
    return Agent(SSHTransport(ep, only_key=key is not None), host)


def _opens(host: Host, key: Path) -> bool:
    """A login with ``key`` alone succeeds (False: refused)."""
    from gpujob.transport.ssh import open_client

    try:
        open_client(replace(host.endpoint(), client_key=str(key)), retries=1, only_key=True).close()
        return True
    except ConnectError as e:
        if "refused gpujob's key" in e.cause:
            return False
        raise


def sharing(host: Host, store: HostStore) -> list[str]:
    """Other profiles that log in as the same user at the same address with the shared key."""
    return [h.name for h in store.all() if h.name != host.name and h.kind != LOCAL and keys.uses_shared_key(h)
            and (h.hostname, h.port, h.user) == (host.hostname, host.port, host.user)]


def rekey_host(name: str, store: HostStore | None = None) -> dict[str, Any]:
    """Move profile ``name`` to a new key of its own (see the module's steps); what was done."""
    from gpujob.transport import mux

    store = store or HostStore()
    host = store.get(name)
    if host.kind == LOCAL:
        raise HostError("'local' is this machine: it logs in with no key", "rekey an SSH profile: gpujob host ls")
    if host.identity_file:
        raise HostError(f"host {name} logs in with your own key {host.identity_file} (--identity); gpujob rekeys "
                        "only its own keys", "replace that key yourself, or add the profile again without --identity: "
                        f"gpujob host add {name} --ssh \"...\" --force")
    mux.disconnect(host)  # nothing keeps a login of the old key open past this command
    pending = keys.pending_key_path(name)
    if pending.exists():  # a rekey cut short after the host took the new key: that key is the profile's
        if keys.pub_path(pending).exists() and _opens(host, pending):
            keys.adopt_key(name, pending)
        else:
            keys.remove_pending_key(name)
    was = "own" if keys.host_key_path(name).exists() else "shared"
    old = keys.client_key_for(name)
    shared = keys.key_path()
    others = sharing(host, store)
    remove = [_blob(old)] + ([_blob(shared)] if shared.exists() and shared != old and not others else [])
    if was == "shared" and others:
        remove = []  # the shared line stays: the other profiles log in with it
    with _agent(host) as current:  # the login that works now: refused here, nothing was changed
        keys.generate(pending, comment=f"gpujob-{name}")
        new_line, new_blob = _line(pending), _blob(pending)
        try:
            added = current.call("authkeys", input=json.dumps({"add": new_line, "near": [_blob(old)]}).encode())
        except BaseException as e:
            keys.remove_pending_key(name)
            if isinstance(e, GpujobError):
                raise type(e)(f"{e.cause}; the profile {name} was left as it was", e.remedy) from None
            raise
        try:
            with _agent(host, pending) as fresh:  # a fresh login with ONLY the new key, then the old lines go
                done = fresh.call("authkeys", input=json.dumps({"remove": [b for b in remove if b],
                                                                "keep": new_blob}).encode())
        except BaseException as e:
            left = _undo(current, new_blob)
            keys.remove_pending_key(name)
            if isinstance(e, GpujobError):
                raise type(e)(f"{e.cause}; the rekey of {name} stopped before its profile changed: "
                              + ("the new key's line was taken off again, the host is as it was" if left is None
                                 else f"the new key's line (a key nobody holds now) could not be taken off: {left}"),
                              e.remedy or f"fix that, then run gpujob host rekey {name} again") from None
            raise
        still = None  # the old key alone, now: refused unless it is authorized outside those files
        if not (was == "shared" and others):
            try:
                still = _opens(host, old)
            except GpujobError:
                pass  # the link failed, not the key: not verified, said so
    keys.adopt_key(name, pending)
    from gpujob.usecases.shell import refresh_ssh_config

    try:
        ssh_config = refresh_ssh_config()  # `ssh gpujob-NAME` offers the new key
    except (OSError, GpujobError):
        ssh_config = None  # `gpujob ssh NAME` rewrites it next time
    removed = sum(done["removed"].values())
    return {"host": name, "address": host.address, "was": was, "file": str(added.get("added") or ""),
            "removed_lines": removed, "old_key_refused": None if still is None else not still,
            "kept_for": others if was == "shared" else [], "ssh_config": ssh_config}


def _undo(agent: Any, new_blob: str) -> str | None:
    """Take the new key's line off again over the old login; None, else why it could not be."""
    try:
        agent.call("authkeys", input=json.dumps({"remove": [new_blob]}).encode())
        return None
    except GpujobError as e:
        return e.cause
    except Exception as e:  # noqa: BLE001 - reported with the failure that led here
        return str(e)


def on_shared_key(store: HostStore | None = None) -> list[str]:
    """The SSH profiles still on the shared key (``host ls``, ``doctor``, ``rekey --all``)."""
    return [h.name for h in (store or HostStore()).all() if h.kind != LOCAL and keys.uses_shared_key(h)]


def rekey_all(store: HostStore | None = None) -> list[dict[str, Any]]:
    """``--all``: every profile on the shared key, each on its own; a failure is its entry's ``error``."""
    store = store or HostStore()
    out: list[dict[str, Any]] = []
    for name in on_shared_key(store):
        try:
            out.append(rekey_host(name, store))
        except GpujobError as e:
            out.append({"host": name, "error": e.cause, "remedy": e.remedy})
    return out
