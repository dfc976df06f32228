"""``gpujob host rekey NAME|--all``: give a profile a new key of its own and take the old one off its host.

Profiles made before per-profile keys log in with gpujob's shared key, authorized on every
instance the user rented, so one provider could log into the others (docs/security.md). The
steps, each verified before the next, so that a host not reached or not verified is left as
it was: over the current login, add the new key's line where the old key's line is; log in
afresh with ONLY the new key and, over that login, remove the old key's line (and the shared
key's) and only those lines; then the profile takes the new key. Until that last step the new
key is a pending file (``keys.pending_key_path``); a failure takes its line off the host again.

Safe at every instant (issue 34): the old lines go only over a login made with the new key alone,
and the host refuses a removal that would leave no line of it; the undo of a cut rekey takes the
new line off only while the old key's line is still there (else the new key is the way in, and
the profile takes it); each file is replaced whole on the host (remote/host/authkeys.py); Ctrl-C is
held back and takes effect where the state is whole, then says which state and what next."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from gpujob.config import keys
from gpujob.config.hosts import LOCAL, Host, HostStore
from gpujob.errors import GpujobError, HostError, Interrupted
from gpujob.usecases.hosts.deferint import Deferred, deferred

if TYPE_CHECKING:
    from remote.host.authkeys import KeysChanged  # the agent's answer, declared where it is made

STEPS = ("add", "login_new", "remove", "check_old", "adopt")  # in order: each a _step_ function below


def _blob(path: Path) -> str:
    """The key's public blob: from the private key (the truth: a .pub may be stale after a crash), else its .pub."""
    import paramiko

    try:
        return paramiko.Ed25519Key.from_private_key_file(str(path)).get_base64()
    except (OSError, paramiko.SSHException):
        try:
            words = keys.pub_path(path).read_text().split()
            return words[1] if len(words) > 1 else ""
        except OSError:
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
    from gpujob.transport.login import KeyRefused
    from gpujob.transport.ssh import open_client

    try:
        open_client(replace(host.endpoint(), client_key=str(key)), retries=1, only_key=True).close()
        return True
    except KeyRefused:
        return False


def sharing(host: Host, store: HostStore) -> list[str]:
    """Other profiles that log in as the same user at the same address with the shared key."""
    return [h.name for h in store.all() if h.name != host.name and h.kind != LOCAL and keys.uses_shared_key(h)
            and (h.hostname, h.port, h.user) == (host.hostname, host.port, host.user)]


def rekey_host(name: str, store: HostStore | None = None) -> dict[str, Any]:
    """Move profile ``name`` to a new key of its own (see the module's steps); what was done.

    Ctrl-C is held back from start to end: it takes effect where the state is whole (before the
    host changed, after an undo, or once the profile has the key the host now holds), and is
    then an ``Interrupted`` naming that state and the next step."""
    store = store or HostStore()
    host = store.get(name)
    if host.kind == LOCAL:
        raise HostError("'local' is this machine: it logs in with no key", "rekey an SSH profile: gpujob host ls")
    if host.identity_file:
        raise HostError(f"host {name} logs in with your own key {host.identity_file} (--identity); gpujob rekeys "
                        "only its own keys", "replace that key yourself, or add the profile again without --identity: "
                        f"gpujob host add {name} --ssh \"...\" --force")
    began = False
    try:
        with deferred() as intr:
            began = True
            done = _rekey(host, store, intr)
    except KeyboardInterrupt as e:  # outside the deferral: before it began, or as it ended
        if isinstance(e, Interrupted):
            raise
        if began:
            raise _finished(name) from None
        raise _untouched(name) from None
    if intr.pending:
        raise _finished(name)
    return done


def _untouched(name: str) -> Interrupted:
    return Interrupted(f"interrupted: the rekey of {name} stopped before the host was changed; the profile keeps "
                       "its key", f"run gpujob host rekey {name} again")


def _finished(name: str) -> Interrupted:
    return Interrupted(f"interrupted: the rekey of {name} had finished when Ctrl-C took effect: the host holds its "
                       "new key, the profile logs in with it", "nothing to redo (gpujob host ls shows the profile)")


def _rekey(host: Host, store: HostStore, intr: Deferred) -> dict[str, Any]:
    from gpujob.transport import mux

    name = host.name
    mux.disconnect(host)  # nothing keeps a login of the old key open past this command
    pending = keys.pending_key_path(name)
    prior: list[str] = []
    if pending.exists():  # a rekey cut short after the host took the new key: that key is the profile's
        if _opens(host, pending):
            prior = [_blob(keys.client_key_for(name))]  # the key it replaced: its line goes too
            _step_adopt(name, pending)
        else:
            keys.remove_pending_key(name)
    was = "own" if keys.host_key_path(name).exists() else "shared"
    old = keys.client_key_for(name)
    old_blob = _blob(old)
    shared = keys.key_path()
    others = sharing(host, store)
    remove = prior + [old_blob] + ([_blob(shared)] if shared.exists() and shared != old and not others else [])
    if was == "shared" and others:
        remove = prior  # the shared line stays: the other profiles log in with it
    with _agent(host) as current:  # the login that works now: refused here, nothing was changed
        if intr.pending:
            raise _untouched(name)
        keys.generate(pending, comment=f"gpujob-{name}")
        new_line, new_blob = _line(pending), _blob(pending)
        stop = _Stop(current, host, new_blob, old, old_blob)
        try:
            added = _step_add(current, new_line, old_blob)
        except BaseException as e:
            stop.out(e)
        if intr.pending:
            stop.out(None)
        try:
            fresh = _step_login_new(host, pending)
        except BaseException as e:
            stop.out(e)
        stop.verified = True
        with fresh:
            if intr.pending:
                stop.out(None)
            try:
                done = _step_remove(fresh, [b for b in remove if b], new_blob)
            except BaseException as e:
                stop.out(e)
        # from here the host may hold the new key alone: the profile takes it before anything else
        still = None  # the old key alone, now: refused unless it is authorized outside those files
        if not (was == "shared" and others) and not intr.pending:
            still = _step_check_old(host, old)
    _step_adopt(name, pending)
    from gpujob.usecases.hosts.shell import refresh_ssh_config

    try:
        ssh_config = refresh_ssh_config()  # `ssh gpujob-NAME` offers the new key
    except (OSError, GpujobError):
        ssh_config = None  # `gpujob ssh NAME` rewrites it next time
    removed = sum(done["removed"].values())
    return {"host": name, "address": host.address, "was": was, "file": str(added.get("added") or ""),
            "removed_lines": removed, "old_key_refused": None if still is None else not still,
            "kept_for": others if was == "shared" else [], "ssh_config": ssh_config}


def _step_add(current: Any, new_line: str, old_blob: str) -> KeysChanged:
    """Over the current login: the new key's line where the old key's is."""
    return current.call("authkeys", input=json.dumps({"add": new_line, "near": [old_blob]}).encode())


def _step_login_new(host: Host, pending: Path) -> Any:
    """A fresh login with ONLY the new key (the agent answering over it): the proof it works."""
    fresh = _agent(host, pending)
    try:
        fresh.call("authkeys", input=b"{}")  # changes nothing; lists the files
    except BaseException:
        fresh.close()
        raise
    return fresh


def _step_remove(fresh: Any, remove: list[str], new_blob: str) -> KeysChanged:
    """Over the new key's login: the old lines off, refused by the host if no line of the new key would stay."""
    return fresh.call("authkeys", input=json.dumps({"remove": remove, "keep": new_blob}).encode())


def _step_check_old(host: Host, old: Path) -> bool | None:
    """Whether the old key alone still opens the host (None: the link failed, not the key: not verified)."""
    try:
        return _opens(host, old)
    except GpujobError:
        return None


def _step_adopt(name: str, pending: Path) -> Path:
    """The profile switches to the new key (only once a login with it worked)."""
    return keys.adopt_key(name, pending)


class _Stop:
    """A rekey stopping part way (a failure, or Ctrl-C): the host put back as it was, or, when its old
    lines are gone already, the profile moved to the new key; the pending key kept when unsure."""

    def __init__(self, current: Any, host: Host, new_blob: str, old: Path, old_blob: str) -> None:
        self.current, self.host, self.name, self.new_blob = current, host, host.name, new_blob
        self.old, self.old_blob = old, old_blob
        self.verified = False  # a login with the new key alone worked

    def _new_only(self) -> bool:
        """The host takes the new key and refuses the old one (the undo's login failed: ask each key)."""
        try:
            return _opens(self.host, keys.pending_key_path(self.name)) and not _opens(self.host, self.old)
        except GpujobError:
            return False

    def out(self, err: BaseException | None) -> NoReturn:
        name, pending = self.name, keys.pending_key_path(self.name)
        left = _undo(self.current, self.new_blob, self.old_blob)
        if left not in (None, GONE) and self.verified and self._new_only():
            left = GONE  # a cut link after the old lines went: the new key is the way in
        if left is None:
            keys.remove_pending_key(name)
            state = "stopped before its profile changed: the new key's line was taken off again, the host is as it was"
            step = f"run gpujob host rekey {name} again"
        elif left == GONE and self.verified:  # the host logs in with the new key only now: the profile takes it
            _step_adopt(name, pending)
            state = "stopped after the host took the old key's line off: the profile now logs in with its new key " \
                    "(a login with it alone worked)"
            step = f"nothing to redo; gpujob host rekey {name} checks it again"
        else:
            state = ("stopped: the new key's line could not be taken off again ({}); the new key is kept as {}"
                     .format("the old key's line is gone" if left == GONE else left, pending))
            step = f"run gpujob host rekey {name} again: it finishes with that key where the host holds it"
        if err is None or (isinstance(err, KeyboardInterrupt) and not isinstance(err, GpujobError)):
            raise Interrupted(f"interrupted: the rekey of {name} {state}", step) from None
        if isinstance(err, GpujobError):
            raise type(err)(f"{err.cause}; the rekey of {name} {state}", err.remedy or step) from None
        raise err


GONE = "gone"  # _undo's answer when the old key's lines are gone: the new key is the way in


def _undo(agent: Any, new_blob: str, old_blob: str) -> str | None:
    """Take the new key's line off again over the old login, only while the old key's line is there;
    None when done, GONE when the host holds the old key no more, else why it could not be."""
    try:
        done = agent.call("authkeys", input=json.dumps({"remove": [new_blob], "while_held": old_blob}).encode())
        return GONE if done.get("held_back") else None
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
        except Interrupted:
            raise  # Ctrl-C ends --all too, once this host's state is whole
        except GpujobError as e:
            out.append({"host": name, "error": e.cause, "remedy": e.remedy})
    return out
