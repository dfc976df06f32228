"""``gpujob host add``: connect once (password if needed), install gpujob's key, detect the platform."""

from __future__ import annotations

import getpass
import shlex
import sys

from gpujob.errors import ConnectError, HostError
from gpujob.hosts import PRESETS, Host, HostStore, detect_preset, parse_ssh_target

DETECT = 'echo "autodl=${AutoDLRegion:-}"; test -d /root/autodl-tmp && echo autodl_tmp=1; echo "vast=${CONTAINER_ID:-}"; echo "runpod=${RUNPOD_POD_ID:-}"'


def install_key(host: Host, password: str) -> None:
    """Log in with the password once and append gpujob's public key to authorized_keys."""
    from gpujob.transport.ssh import SSHTransport, public_key_line

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


def detect_platform(host: Host) -> str:
    """The preset the instance itself says it is (AutoDL's variables and folders)."""
    from gpujob.transport.ssh import SSHTransport

    t = SSHTransport(host)
    try:
        out = dict(line.split("=", 1) for line in t.run(DETECT).text.splitlines() if "=" in line)
    finally:
        t.close()
    if out.get("autodl") or out.get("autodl_tmp"):
        return "autodl"
    if out.get("vast"):
        return "vast"
    if out.get("runpod"):
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
            host.preset = detect_platform(host)
    if host.shutdown_command is None:
        host.shutdown_command = PRESETS[host.preset]["shutdown_command"]
    store.save(host)
    return host
