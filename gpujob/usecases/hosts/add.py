"""``gpujob host add`` and ``host set``: connect once (password if needed), install gpujob's key, detect the
platform; apply the settings both take (the idle-shutdown watcher is installed on the instance)."""

from __future__ import annotations

import dataclasses
import getpass
import json
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gpujob.config.hosts import (
    PRESETS,
    Host,
    HostStore,
    check_host_name,
    check_profile,
    detect_preset,
    parse_ssh_target,
)
from gpujob.errors import ConnectError, GpujobError, HostError, HostKeyChanged
from gpujob.jsontypes import JSONObject

# the settings ``host add`` and ``host set`` both take; None leaves one as it is, "" clears it
SETTINGS = ("shutdown_command", "private_address", "network_turbo", "hf_endpoint", "pip_index_url", "data_disk",
            "tensorboard_port", "idle_shutdown", "slurm", "partition", "account", "qos", "released_after") + tuple("power_" + k for k in (
                "on", "off", "state", "address", "stock_out", "wait", "boot_timeout"))
SLURM_SETTINGS = ("partition", "account", "qos")
_OFF = ("0", "off", "none", "")


@dataclass
class IdleShutdown:
    """The instance's idle watcher as installed: off (``minutes`` 0) or power off after ``text``."""

    host: str
    text: str  # as the user wrote it (``30m``)
    minutes: float
    pid: int | None = None


@dataclass
class HostChange:
    """A profile as saved by ``host add``/``host set``, and the idle watcher when it was changed."""

    host: Host
    idle: IdleShutdown | None = None
    tried: bool | None = None  # host set --ssh: the new address answered (False: saved untried, --no-check)
    same_as: list[str] = field(default_factory=list)  # host add: other profiles that reach this instance


def profile(host: Host) -> JSONObject:
    """A profile as ``host add/set/ls --json`` print it."""
    return {"name": host.name, **host.to_dict()}

# AutoDL's variables may be in the session, only in a login shell, or only in PID 1's environment
# (the container's own); its data disk is /root/autodl-tmp. One command reads them all.
_VARS = ("AutoDLRegion", "AutoDLContainerUUID", "CONTAINER_ID", "RUNPOD_POD_ID")
DETECT = (
    "{ env; bash -lc env 2>/dev/null; tr '\\0' '\\n' < /proc/1/environ 2>/dev/null; } | grep -E '^("
    + "|".join(_VARS) + ")=' | sort -u; test -d /root/autodl-tmp && echo autodl_tmp=1; "
    "test -f /etc/network_turbo && echo network_turbo=1; true"
)


def install_key(host: Host, password: str | None, pub: str) -> None:
    """Log in with the password once (None: with a key of the user's ssh-agent the host took) and append
    the public key line ``pub`` (the profile's own key) to authorized_keys."""
    from gpujob.transport.ssh import SSHTransport

    t = SSHTransport(host, password=password)
    try:
        q = shlex.quote(pub)
        res = t.run(
            "umask 077; mkdir -p ~/.ssh && touch ~/.ssh/authorized_keys && "
            f"(grep -qxF {q} ~/.ssh/authorized_keys || echo {q} >> ~/.ssh/authorized_keys)"
        )
        if res.rc != 0:
            raise ConnectError(f"could not install the key on {host.address}: {res.stderr.decode()[-300:]}",
                               "is the home folder writable? (disk full?)")
    finally:
        t.close()


def _install_own_key(host: Host, password: str | None) -> None:
    """The password step (or the ssh-agent's login): the profile gets a key of its own (config/keys.py),
    installed there and tried alone; a failed step leaves no new key behind (the next try makes another)."""
    from gpujob.config.keys import ensure_host_key, host_key_path, public_key_line, remove_host_key
    from gpujob.transport.ssh import open_client

    made = not host_key_path(host.name).exists()
    try:
        install_key(host, password, public_key_line(ensure_host_key(host.name)))
        open_client(host, retries=1, only_key=True).close()
    except BaseException:
        if made:
            remove_host_key(host.name)
        raise


def _agent_opened(host: Host) -> bool:
    """The login just made went through a key of the user's ssh-agent: gpujob's own key alone is refused."""
    import os

    from gpujob.transport.login import KeyRefused, agent_key_count
    from gpujob.transport.ssh import open_client

    if os.environ.get("GPUJOB_NO_SSH_AGENT") or not agent_key_count():
        return False
    try:
        open_client(host, retries=1, only_key=True).close()
    except KeyRefused:
        return True
    return False


def detect_platform(host: Host) -> tuple[str, dict[str, str]]:
    """The preset the instance itself says it is, and what it said (AutoDL's variables and folders)."""
    from gpujob.transport.ssh import SSHTransport

    t = SSHTransport(host)
    try:
        out = dict(line.split("=", 1) for line in t.run(DETECT, timeout=60).text.splitlines() if "=" in line)
    finally:
        t.close()
    return platform_of(out), out


def platform_of(found: dict[str, str]) -> str:
    if found.get("AutoDLRegion") or found.get("AutoDLContainerUUID") or found.get("autodl_tmp"):
        return "autodl"
    if found.get("CONTAINER_ID"):
        return "vast"
    if found.get("RUNPOD_POD_ID"):
        return "runpod"
    return "generic"


def _identity(path: str, retry: str) -> str:
    """``--identity PATH`` checked before anything connects or is saved, as an absolute path (a
    relative one would name another file from another folder)."""
    from gpujob.transport.endpoint import identity_problem

    why = identity_problem(path)
    if why:
        raise HostError(f"--identity: {why}; nothing was saved",
                        f"give the private key the instance accepts: {retry} (without --identity gpujob makes and "
                        "installs its own key, with the instance's password once)")
    return str(Path(path).expanduser().absolute())


def add_host(
    name: str, ssh_line: str, *, password: str | None = None, root: str | None = None, preset: str | None = None,
    price: float | None = None, identity: str | None = None, check: bool = True, force: bool = False,
    store: HostStore | None = None, settings: Mapping[str, str | None] | None = None,
    on_detect: Callable[[Host, dict[str, str]], None] | None = None,
) -> HostChange:
    """Create (or with ``force`` replace) a host profile; the password is used once, never stored.

    ``settings`` (keys of ``SETTINGS``) are applied once it is saved; ``on_detect`` hears the platform the
    instance said it is (no ``preset``)."""
    store = store or HostStore()
    if name == "local":
        raise HostError("'local' is built in", "pick another name")
    check_host_name(name)
    existing = {h.name for h in store.all()}
    if name in existing and not force:
        raise HostError(f"host {name!r} exists", f"change it with gpujob host set {name} --ssh \"...\", or add --force")
    fields = parse_ssh_target(ssh_line)
    host = Host(name=name, **fields)
    settle(dataclasses.replace(host), settings or {})  # a refused combination saves nothing
    if identity:
        host.identity_file = identity
    host.preset = preset or detect_preset(host.hostname)
    host.root = root
    host.price_per_hour = price
    check_profile(host, "save")  # before any connection: a value is never tried, only refused
    if check:
        if identity:
            host.identity_file = _identity(identity, f"gpujob host add {name} --ssh \"...\" --identity ~/.ssh/KEY")
        from gpujob.transport.login import KeyRefused, NotReached
        from gpujob.transport.ssh import open_client

        try:
            open_client(host, retries=1).close()
        except HostKeyChanged:
            raise
        except ConnectError as e:
            if isinstance(e, KeyRefused) and identity:  # the user's key: a password installs gpujob's, not it
                raise type(e)(f"{e.cause}; nothing was saved",
                              f"check that {identity}.pub is in the instance's ~/.ssh/authorized_keys, or run gpujob "
                              f"host add {name} --ssh \"...\" without --identity (gpujob installs its own key with the "
                              "instance's password)") from None
            if not isinstance(e, (KeyRefused, NotReached)):
                # the host answered and its login policy asks for what gpujob does not do (a second
                # factor, no key login, an algorithm): a key installed with the password cannot help
                raise type(e)(f"{e.cause}; nothing was saved", e.remedy) from None
            if not isinstance(e, KeyRefused):
                # the transport's remedy names `host set`, for a profile that is not saved: say what is
                again = f"gpujob host add {name} --ssh \"ssh -p PORT user@HOST\" again; --no-check saves it untried"
                raise type(e)(f"{e.cause}; nothing was saved",
                              f"check the host name in the console's login line, then {again}"
                              if "cannot resolve" in e.cause else "is the instance powered on? Copy its login line "
                              f"again (the port can change after a restart) and run {again}") from None
            if isinstance(e, KeyRefused) and e.methods is not None and not {"password", "keyboard-interactive"} & set(e.methods):
                raise type(e)(f"{e.cause}, and it takes no password login (it offers {', '.join(e.methods)}): gpujob "
                              "cannot install its key with a password; nothing was saved",
                              "put a public key of yours in the instance's ~/.ssh/authorized_keys (its provider's web "
                              f"terminal or key settings), then gpujob host add {name} --ssh \"...\" --identity "
                              "~/.ssh/KEY") from None
            if password is None:
                if not sys.stdin.isatty():
                    raise ConnectError(
                        f"{host.address} needs a password once to install gpujob's key",
                        "run interactively, or pass --password-stdin (e.g. from a password manager); a key of "
                        "yours the instance already accepts: --identity ~/.ssh/KEY",
                    ) from None
                password = getpass.getpass(f"password for {host.user}@{host.hostname} (used once, not stored): ")
            _install_own_key(host, password)
        else:
            if not identity and _agent_opened(host):  # the user's agent key, not gpujob's: a profile that worked
                _install_own_key(host, None)  # only while the agent held it, its refusals naming gpujob's key
        if not preset:
            host.preset, found = detect_platform(host)
            region = "".join(c for c in found.get("AutoDLRegion", "") if c.isprintable() and c not in "\"'\\")[:64]
            host.region = region or None  # the instance said it: nothing in it may reach a file or a terminal
            if on_detect:
                on_detect(host, found)
    if host.shutdown_command is None and (settings or {}).get("slurm") != "true":  # a login node is never powered off
        host.shutdown_command = PRESETS[host.preset]["shutdown_command"]
    store.save(host, new=not force)  # another `host add` of this name may have saved it meanwhile
    change = HostChange(host, same_as=same_instance(host, store))
    if any((settings or {}).get(k) is not None for k in SETTINGS):
        change.idle = apply_settings(host, settings or {}, store)
        store.save(host)
    return change


def same_instance(host: Host, store: HostStore) -> list[str]:
    """The other SSH profiles that reach the instance ``host`` reaches: the same host key (or the
    same address) and the same root. Their jobs would be ``host``'s too (ls lists them once)."""
    from gpujob.config.keys import known_hosts_path
    from gpujob.transport.ssh import recorded_keys

    kh = known_hosts_path()
    mine = recorded_keys(kh, host.hostname, host.port)
    out = []
    for other in store.all():
        if other.kind == "local" or other.name == host.name or other.remote_root != host.remote_root:
            continue
        if (other.hostname, other.port) == (host.hostname, host.port) or mine & recorded_keys(kh, other.hostname, other.port):
            out.append(other.name)
    return out


def update_host(
    name: str, *, ssh_line: str | None = None, root: str | None = None, preset: str | None = None,
    identity: str | None = None, price: float | None = None, settings: Mapping[str, str | None] | None = None,
    store: HostStore | None = None, check: bool = True,
) -> HostChange:
    """``host set``: change what is given (None: unchanged) and save the profile. A new ``ssh_line``
    is tried first (with ``check``): an address that does not answer is not saved over a good one."""
    store = store or HostStore()
    host = store.get(name)
    if host.kind == "local":
        raise HostError("'local' is built in (this machine): it has no settings to change",
                        "set GPUJOB_LOCAL_ROOT to move its root; a price or a power command belongs to an SSH profile")
    tried = None
    if ssh_line:
        for k, v in parse_ssh_target(ssh_line).items():
            setattr(host, k, v)
        if identity is not None:
            host.identity_file = identity
        tried = False
        if check:
            check_profile(host, "save")  # before connecting: a value is refused, never tried
            if identity:
                host.identity_file = _identity(identity, f"gpujob host set {name} --identity ~/.ssh/KEY")
            from gpujob.transport.ssh import open_client

            try:
                open_client(host, retries=1).close()
            except ConnectError as e:
                raise type(e)(f"{e.cause}; the profile {name!r} was not changed",
                              f"{e.remedy + '; ' if e.remedy else ''}check the line, or save it untried: "
                              f"gpujob host set {name} --ssh \"...\" --no-check") from None
            tried = True
    for attr, val in (("root", root), ("preset", preset), ("identity_file", identity)):
        if val is not None and not (attr == "identity_file" and tried):  # tried: checked and made absolute above
            setattr(host, attr, val)
    if price is not None:
        host.price_per_hour = price
    check_profile(host, "save")
    if identity and check and not ssh_line:
        host.identity_file = _identity(identity, f"gpujob host set {name} --identity ~/.ssh/KEY")
    change = HostChange(host, apply_settings(host, settings or {}, store), tried)
    store.save(host)
    return change


def apply_settings(host: Host, settings: Mapping[str, str | None], store: HostStore) -> IdleShutdown | None:
    """Apply ``settings`` (the command line's texts: None not given, "" clears) to ``host`` (not saved);
    the idle watcher, when ``idle_shutdown`` is among them."""
    settle(host, settings)
    text = settings.get("idle_shutdown")
    if text is None:
        return None
    idle = set_idle_shutdown(host, text, store)
    host.idle_shutdown = None if text.strip().lower() in _OFF else text  # the instance revives its watcher after a reboot
    return idle


def settle(host: Host, settings: Mapping[str, str | None]) -> None:
    """Every setting but the idle watcher applied to ``host``; a combination that cannot hold is refused
    here, before anything is saved or connected (``host add`` checks on a copy first)."""
    if settings.get("private_address") is not None:
        host.private_address = settings["private_address"] or None
    if settings.get("shutdown_command") is not None:
        host.shutdown_command = settings["shutdown_command"] or None
    for attr in ("network_turbo", "hf_endpoint", "pip_index_url", "data_disk", "tensorboard_port"):  # "" clears
        val = settings.get(attr)
        if val is not None:
            setattr(host, attr, {"true": True, "false": None}.get(val, val) if attr == "network_turbo" else (val or None))
    if (slurm := settings.get("slurm")) is not None:
        host.scheduler = "slurm" if slurm == "true" else None
        if slurm != "true":  # off: its partition, account and QOS go with it
            host.partition = host.account = host.qos = None
    for attr in SLURM_SETTINGS:  # "" clears
        if (val := settings.get(attr)) is not None:
            setattr(host, attr, val or None)
    if (val := settings.get("released_after")) is not None:  # "" clears: the preset's again
        host.released_after = check_released_after(val) or None
    if any(getattr(host, a) for a in SLURM_SETTINGS) and not host.slurm:
        raise GpujobError(f"--partition, --account and --qos are Slurm's: {host.name} is not a Slurm host",
                          f"add --slurm (jobs on {host.name} then go to Slurm with sbatch; docs/slurm.md)")
    for key in SETTINGS:
        if key.startswith("power_") and (value := settings.get(key)) is not None:  # "" clears one
            check_power_setting(key, value)
            host.power = {k: v for k, v in {**host.power, key[6:]: value}.items() if v}
    if host.slurm and (host.shutdown_command or host.power or settings.get("idle_shutdown") not in (None, *_OFF)):
        raise GpujobError(f"{host.name} is a Slurm cluster's login node: gpujob never powers it or a compute "
                          "node off (--shutdown-command, --power-*, --idle-shutdown)",
                          "leave those out; Slurm releases a job's nodes when it ends")


def check_released_after(value: str) -> str:
    """``--released-after``: a duration from an hour to ten years, ``off`` (never released) or "" (the
    preset's); the value as it will be kept."""
    from gpujob.config.hosts import RELEASE_NEVER

    text = value.strip()
    if not text or text.lower() in RELEASE_NEVER:
        return "off" if text else ""
    from gpujob.bundle import import_remote

    try:
        seconds = import_remote("core.protocol").parse_duration(text)
    except ValueError as e:
        raise GpujobError(f"--released-after: {e}", "e.g. --released-after 15d (AutoDL's), off (never), '' "
                          "(the preset's)") from None
    if not 3600 <= seconds <= 3650 * 86400:
        raise GpujobError(f"--released-after: {text[:40]!r} is out of range: from 1h to 3650d",
                          "e.g. --released-after 15d (AutoDL's), off (never)")
    return text


def check_power_setting(key: str, value: str) -> None:
    """A duration or a regex of ``power:`` is checked when it is set, not at the next power-on."""
    flag = "--" + key.replace("_", "-")
    if not value:
        return
    if key in ("power_wait", "power_boot_timeout"):
        from gpujob.bundle import import_remote

        try:
            import_remote("core.protocol").parse_duration(value)
        except ValueError as e:
            raise GpujobError(f"{flag}: {e}", f"e.g. {flag} 10m") from None
    elif key == "power_stock_out":
        import re

        try:
            re.compile(value)
        except re.error as e:
            raise GpujobError(f"{flag}: {value[:60]!r} is not a regular expression ({e})",
                              "write a Python regex, e.g. --power-stock-out 'no GPU|sold out'") from None


def set_idle_shutdown(host: Host, text: str, store: HostStore) -> IdleShutdown:
    """Install (``0``/``off``: remove) the instance's idle watcher: power off after N idle minutes."""
    from gpujob.bundle import import_remote
    from gpujob.transport.agent import connect_agent

    parse_duration = import_remote("core.protocol").parse_duration

    try:
        minutes = 0.0 if text.strip().lower() in _OFF else parse_duration(text) / 60.0
    except ValueError as e:
        raise GpujobError(f"--idle-shutdown: {e}", "e.g. --idle-shutdown 30m (or off)") from None
    if minutes and not host.shutdown_command:
        raise HostError(f"host {host.name} has no shutdown command", f"set one: gpujob host set {host.name} --shutdown-command CMD")
    # the saved profile is the one reached: a new --ssh line of the same command is not saved yet
    res = connect_agent(store.get(host.name)).call("idle_shutdown", ["--minutes", repr(minutes)],
                                                   input=json.dumps({"command": host.shutdown_command}).encode())
    return IdleShutdown(host.name, text, minutes, res.get("pid"))
