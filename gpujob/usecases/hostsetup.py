"""``gpujob host add``: connect once (password if needed), install gpujob's key, detect the platform."""

from __future__ import annotations

import getpass
import shlex
import sys

from gpujob.config.hosts import PRESETS, Host, HostStore, check_host_name, detect_preset, parse_ssh_target
from gpujob.errors import ConnectError, HostError

# AutoDL's variables may be in the session, only in a login shell, or only in PID 1's environment
# (the container's own); its data disk is /root/autodl-tmp. One command reads them all.
_VARS = ("AutoDLRegion", "AutoDLContainerUUID", "CONTAINER_ID", "RUNPOD_POD_ID")
DETECT = (
    "{ env; bash -lc env 2>/dev/null; tr '\\0' '\\n' < /proc/1/environ 2>/dev/null; } | grep -E '^("
    + "|".join(_VARS) + ")=' | sort -u; test -d /root/autodl-tmp && echo autodl_tmp=1; "
    "test -f /etc/network_turbo && echo network_turbo=1; true"
)


def install_key(host: Host, password: str) -> None:
    """Log in with the password once and append gpujob's public key to authorized_keys."""
    from gpujob.config.keys import public_key_line
    from gpujob.transport.ssh import SSHTransport

    pub = public_key_line()
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


def add_host(
    name: str, ssh_line: str, *, password: str | None = None, root: str | None = None, preset: str | None = None,
    price: float | None = None, identity: str | None = None, check: bool = True, force: bool = False,
    store: HostStore | None = None,
) -> Host:
    """Create (or with ``force`` replace) a host profile; the password is used once, never stored."""
    store = store or HostStore()
    if name == "local":
        raise HostError("'local' is built in", "pick another name")
    check_host_name(name)
    existing = {h.name for h in store.all()}
    if name in existing and not force:
        raise HostError(f"host {name!r} exists", f"change it with gpujob host set {name} --ssh \"...\", or add --force")
    fields = parse_ssh_target(ssh_line)
    host = Host(name=name, **fields)
    if identity:
        host.identity_file = identity
    host.preset = preset or detect_preset(host.hostname)
    host.root = root
    host.price_per_hour = price
    if check:
        from gpujob.transport.ssh import open_client

        try:
            open_client(host, retries=1).close()
        except ConnectError as e:
            if "refused gpujob's key" not in e.cause:
                raise
            if password is None:
                if not sys.stdin.isatty():
                    raise ConnectError(
                        f"{host.address} needs a password once to install gpujob's key",
                        "run interactively, or pass --password-stdin (e.g. from a password manager)",
                    ) from None
                password = getpass.getpass(f"password for {host.user}@{host.hostname} (used once, not stored): ")
            install_key(host, password)
            open_client(host, retries=1).close()
        if not preset:
            host.preset, found = detect_platform(host)
            host.region = found.get("AutoDLRegion") or None
            if host.preset != "generic":
                p = PRESETS[host.preset]
                where = f" (region {host.region})" if host.region else ""
                print(f"detected {host.preset}{where}: preset {host.preset} — root {root or p['root']}, shutdown "
                      f"{p['shutdown_command'] or 'off'}, TensorBoard port {p['tensorboard_port']}, caches under the root"
                      + ("; /etc/network_turbo exists (gpujob host set NAME --network-turbo true to use it)"
                         if found.get("network_turbo") else "")
                      + f"; change with gpujob host set {name} --preset ...", file=sys.stderr)
    if host.shutdown_command is None:
        host.shutdown_command = PRESETS[host.preset]["shutdown_command"]
    store.save(host)
    return host
