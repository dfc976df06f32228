"""Host profiles: parsing a pasted ``ssh -p PORT user@host`` line, presets, storage (0600).

The host ``local`` always exists: it runs jobs on this machine through the same agent.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypedDict

from gpujob.config.paths import atomicfile, config_dir, state_dir, write_private
from gpujob.errors import HostError
from gpujob.transport.endpoint import LOCAL, Endpoint

# A profile name is a word on the command line and a key in hosts.yaml: never a path or an option.
_HOST_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")
_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}\$?$")
_DNS_RE = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$")
# ssh's own options: those that take a value (skipped with it) and flags (skipped alone)
_SSH_VALUE_OPTS = set("BbcDEeFIiJLlmOopQRSWw")
_SSH_FLAGS = set("46AaCfGgKkMNnqsTtvXxY")


def check_host_name(name: str) -> str:
    """``name`` when it can name a host profile; else a ``HostError`` saying what a name may hold."""
    if not _HOST_NAME_RE.fullmatch(name or ""):
        raise HostError(f"{name[:80]!r} cannot name a host: use letters, digits, '.', '_' and '-' (at most 64), "
                        "not starting with '.' or '-'", "e.g. gpujob host add a100 --ssh \"ssh -p PORT root@HOST\"")
    return name


# Values written into files other programs read (~/.ssh/config, shell lines, YAML): a newline in
# an IdentityFile once added a ProxyCommand to ~/.ssh/config, and a '"' made OpenSSH reject the file
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_QUOTED_FIELDS = ("hostname", "user", "identity_file")  # words of an ssh_config line: no quote either
_TEXT_FIELDS = ("root", "data_disk", "agent_python", "private_address", "region", "hf_endpoint", "pip_index_url",
                "preset", "currency", "shutdown_command", "idle_shutdown", "released_after")


def unsafe_values(host: Host) -> list[str]:
    """The profile's fields whose value holds a control character (a newline) or, where it becomes a
    word of an ssh_config line, a quote or a backslash."""
    bad = []
    for f in _QUOTED_FIELDS + _TEXT_FIELDS:
        v = getattr(host, f)
        if isinstance(v, str) and (_CONTROL.search(v) or (f in _QUOTED_FIELDS and re.search(r"[\"'\\]", v))):
            bad.append(f)
    bad += [f"env {k}" for k, v in host.env.items() if _CONTROL.search(str(k)) or _CONTROL.search(str(v))
            or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(k))]
    return bad


def check_profile(host: Host, when: str = "use") -> Host:
    """``host`` when every value is safe to write into ~/.ssh/config and shell lines; else a
    ``HostError`` naming the fields (``when``: ``save`` at host add/set, ``use`` for a stored one)."""
    if host.kind == LOCAL:
        return host
    bad = unsafe_values(host)
    if not bad:
        return host
    what = ", ".join(f"{f} {getattr(host, f, '')!r}"[:120] if not f.startswith("env ") else f for f in bad)
    if when == "save":
        raise HostError(f"host {host.name}: {what} holds a newline, a control character or a quote",
                        "give the value without them (a path with spaces is fine); nothing was saved")
    raise HostError(f"host profile {host.name} in hosts.yaml has a value gpujob will not write into ssh's config "
                    f"or a shell line: {what} (a newline, a control character or a quote)",
                    f"fix it in hosts.yaml, or gpujob host rm {host.name} and add it again")


@dataclass
class Host:
    """One place jobs run. ``kind`` is ``ssh`` or ``local``."""

    name: str
    kind: str = "ssh"
    hostname: str = ""
    port: int = 22
    user: str = "root"
    identity_file: str | None = None
    root: str | None = None  # gpujob's folder on the instance; None = preset default
    preset: str = "generic"
    price_per_hour: float | None = None
    currency: str = "CNY"
    shutdown_command: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    connect_timeout: float = 15.0
    idle_shutdown: str | None = None  # e.g. "30m": the instance powers off when idle (set with host set)
    private_address: str | None = None  # the address other nodes reach this one at (multi-node)
    agent_python: str | None = None  # the interpreter the agent uses; None = search the usual places
    # network and caches (AutoDL's academic proxy, mirrors): sent to jobs as environment variables
    # (settings_env below; the agent applies them in remote/view/tensorboard.py job_env)
    network_turbo: bool | str | None = None  # true/"both", "setup" or "run": source /etc/network_turbo
    hf_endpoint: str | None = None  # e.g. https://hf-mirror.com
    pip_index_url: str | None = None
    data_disk: str | None = None  # the fast data disk; None = preset default
    tensorboard_port: int | None = None  # None = preset default
    region: str | None = None  # AutoDL's region, as the instance reports it
    # laptop-side commands that switch the instance on and off (docs/power.md): on, off, state, address,
    # and stock_out (a regex), wait and boot_timeout (durations)
    power: dict[str, str] = field(default_factory=dict)
    powered_on_at: float | None = None  # when gpujob last powered it on (a preflight is due after)
    powered_off_at: float | None = None  # when this laptop first found it off since (the meter stopped)
    # how long the platform keeps a powered-off instance before it releases it and wipes its disk
    # (docs/power.md): "15d"; None = the preset's; "off" = never
    released_after: str | None = None
    bench: dict[str, Any] | None = None  # the last preflight's figures (gpujob doctor HOST --bench)
    # a Slurm cluster's login node (docs/slurm.md): jobs go to Slurm with sbatch; these are its defaults
    # for every job (a job file's slurm: section overrides them)
    scheduler: str | None = None  # "slurm", or None: the host runs its jobs itself
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    # an instance a pool made (docs/pools.md): the pool's name and the provider's id; released with the pool's command
    pool: str | None = None
    instance_id: str | None = None

    @property
    def slurm(self) -> bool:
        """Whether jobs on this host go to its Slurm cluster."""
        return self.scheduler == "slurm"

    def scheduler_doc(self) -> dict[str, str] | None:
        """What a submit tells the agent of the cluster (spec.json's ``scheduler``); None: no scheduler."""
        if not self.slurm:
            return None
        given = {"partition": self.partition, "account": self.account, "qos": self.qos}
        return {"kind": "slurm", **{k: v for k, v in given.items() if v}}

    @property
    def remote_root(self) -> str:
        """The root on the instance (``~`` is expanded there)."""
        if self.root:
            return self.root
        return PRESETS.get(self.preset, PRESETS["generic"])["root"]

    @property
    def data_disk_path(self) -> str | None:
        """The data disk (caches, checkpoints): the profile's, else the preset's."""
        return self.data_disk or self.preset_values.get("data_disk")

    @property
    def tb_port(self) -> int:
        return self.tensorboard_port or int(self.preset_values.get("tensorboard_port") or 6006)

    @property
    def release_after_s(self) -> float | None:
        """Seconds a powered-off instance keeps its disk before the platform releases it (None: never);
        ``ValueError`` for a hand-edited value that is no duration."""
        text = self.released_after or self.preset_values.get("released_after")
        if not text or str(text).strip().lower() in RELEASE_NEVER:
            return None
        from gpujob.bundle import import_remote

        return float(import_remote("core.protocol").parse_duration(text))

    @property
    def preset_values(self) -> Preset:
        return PRESETS.get(self.preset, PRESETS["generic"])

    def settings_env(self) -> dict[str, str]:
        """The profile's network settings as the variables jobs (and the agent's setup) read."""
        out: dict[str, str] = {}
        turbo = self.network_turbo
        if turbo not in (None, False, "", "false", "off", "no"):
            out["GPUJOB_NETWORK_TURBO"] = "both" if turbo is True or str(turbo).lower() in ("true", "yes", "on", "1") else str(turbo)
        if self.hf_endpoint:
            out["HF_ENDPOINT"] = self.hf_endpoint
        if self.pip_index_url:
            out["PIP_INDEX_URL"] = self.pip_index_url
        return out

    @property
    def address(self) -> str:
        return "this machine" if self.kind == LOCAL else f"{self.user}@{self.hostname}:{self.port}"

    def endpoint(self) -> Endpoint:
        """What the transport needs to reach this host; gpujob's own key is made here if it is used."""
        from gpujob.config.keys import client_key_for, known_hosts_path

        ssh = self.kind != LOCAL
        return Endpoint(
            name=self.name, kind=self.kind, hostname=self.hostname, port=self.port, user=self.user,
            identity_file=self.identity_file, client_key=str(client_key_for(self.name)) if ssh and not self.identity_file else "",
            known_hosts=str(known_hosts_path()) if ssh else "", connect_timeout=self.connect_timeout,
            root=self.remote_root, agent_python=self.agent_python,
        )

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if v not in (None, {}, "") and k != "name"}
        # variables that came from the settings fields on load are not saved twice; hand-set ones stay
        merged, now_ = getattr(self, "_merged_env", {}), self.settings_env()
        env = {k: v for k, v in self.env.items() if k not in now_ and merged.get(k, object()) != v}
        if env:
            d["env"] = env
        else:
            d.pop("env", None)
        return d




# Platform defaults (from each platform's own documentation of its instances' disks). Caches (HF_HOME,
# PIP_CACHE_DIR) live under the root, so on AutoDL they land on the data disk /root/autodl-tmp rather
# than the 30 GB system disk.
class Preset(TypedDict):
    """A platform's defaults: the agent's root, how the instance shuts itself down, its data disk."""

    root: str
    shutdown_command: str | None
    data_disk: str | None
    tensorboard_port: int
    network_turbo: str | None
    released_after: str | None  # a powered-off instance is released (its disk wiped) after this long


RELEASE_NEVER = ("off", "never", "none", "0")
PRESETS: dict[str, Preset] = {
    "generic": {"root": "~/.gpujob", "shutdown_command": None, "data_disk": None, "tensorboard_port": 6006,
                "network_turbo": None, "released_after": None},
    "autodl": {"root": "/root/autodl-tmp/gpujob", "shutdown_command": "/usr/bin/shutdown",
               "data_disk": "/root/autodl-tmp", "tensorboard_port": 6006, "network_turbo": None,
               "released_after": "15d"},  # AutoDL: released 15 days after its power-off (shared/AUTODL.md)
    "vast": {"root": "/workspace/.gpujob", "shutdown_command": "vastai stop instance $CONTAINER_ID",
             "data_disk": "/workspace", "tensorboard_port": 6006, "network_turbo": None,
             "released_after": None},
    "runpod": {"root": "/workspace/.gpujob", "shutdown_command": "runpodctl stop pod $RUNPOD_POD_ID",
               "data_disk": "/workspace", "tensorboard_port": 6006, "network_turbo": None,
               "released_after": None},
}


def local_host() -> Host:
    """The embedded default host: this machine, root ``$GPUJOB_LOCAL_ROOT`` or ``~/.gpujob``."""
    return Host(name=LOCAL, kind=LOCAL, hostname="localhost", root=os.environ.get("GPUJOB_LOCAL_ROOT") or str(Path.home() / ".gpujob"))


class SshTarget(TypedDict, total=False):
    """What a login line says of a profile (the rest keeps its defaults)."""

    hostname: str
    port: int
    user: str
    identity_file: str


def parse_ssh_target(line: str) -> SshTarget:
    """Read ``ssh -p 41234 root@host``, ``user@host:port``, ``host:port`` or an ~/.ssh/config alias.

    Strict: anything that is not an ssh option, a user, a host name or address and a port is refused,
    so a garbage line is caught here even when the host is not contacted (``--no-check``)."""
    line = line.strip()
    example = 'paste the console\'s login line, e.g. --ssh "ssh -p 41234 root@connect.westb.seetacloud.com"'
    if not line:
        raise HostError("empty --ssh value", example)
    try:
        words = shlex.split(line)
    except ValueError as e:
        raise HostError(f"cannot read {line[:80]!r}: {e}", "quote it as the console shows it") from None
    out: SshTarget = {}
    target = None
    if words and words[0] in ("ssh", "/usr/bin/ssh"):
        words = words[1:]
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("-") and len(w) > 1:
            opt, val = w[1], w[2:]
            if opt in _SSH_VALUE_OPTS:
                if not val:
                    if i + 1 >= len(words):
                        raise HostError(f"ssh option {w} lacks its value in {line[:80]!r}", example)
                    i += 1
                    val = words[i]
                _ssh_option(out, opt, val)
            elif not set(w[1:]) <= _SSH_FLAGS:
                raise HostError(f"{w[:40]!r} is not an ssh option", example)
        elif target is None:
            target = w
        else:
            raise HostError(f"{line[:80]!r} has more after the host ({w[:40]!r}): a command is not part of a login line",
                            example)
        i += 1
    if target is None:
        raise HostError(f"no host in {line[:80]!r}", example)
    if target.startswith("ssh://"):
        target = target[6:].rstrip("/")
    if "@" in target:
        out["user"], target = target.rsplit("@", 1)
    if target.startswith("[") and "]" in target:  # [::1]:2222
        target, _, rest = target[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise HostError(f"cannot read the host in {line[:80]!r}", example)
            out["port"] = _port(rest[1:])
    elif target.count(":") == 1:
        target, port = target.split(":")
        out["port"] = _port(port)
    out["hostname"] = check_address(target, line)
    if "user" in out and not _USER_RE.fullmatch(out["user"]):
        raise HostError(f"{out['user'][:40]!r} is not a user name (in {line[:80]!r})", example)
    alias = _ssh_config_lookup(target)
    if alias:
        out.setdefault("user", alias.get("user", "root"))
        out.setdefault("port", _port(str(alias.get("port", 22))))
        if alias.get("identityfile"):
            out.setdefault("identity_file", str(Path(alias["identityfile"][0]).expanduser()))
        out["hostname"] = alias.get("hostname", target)
    return out


def _ssh_option(out: SshTarget, opt: str, val: str) -> None:
    """Record the ssh options a profile keeps (-p, -i, -l, -o Port/User); others are checked and skipped."""
    if opt == "p":
        out["port"] = _port(val)
    elif opt == "i":
        out["identity_file"] = str(Path(val).expanduser())
    elif opt == "l":
        out["user"] = val
    elif opt == "o":
        k, sep, v = val.partition("=")
        if not sep:
            k, _, v = val.partition(" ")
        if k.strip().lower() == "port":
            out["port"] = _port(v.strip())
        elif k.strip().lower() == "user":
            out["user"] = v.strip()


def check_address(target: str, line: str = "") -> str:
    """``target`` when it is a host name, an IP address or an ~/.ssh/config alias (read from ``line``)."""
    try:
        ipaddress.ip_address(target)
        return target
    except ValueError:
        pass
    if not _DNS_RE.fullmatch(target):
        where = f" (in {line[:80]!r})" if line and line != target else ""
        raise HostError(f"{target[:60]!r} is not a host name or address{where}",
                        'expected something like "ssh -p 41234 root@connect.westb.seetacloud.com"')
    return target


def _port(text: str) -> int:
    p = int(text) if text.isdigit() and len(text) <= 5 else -1
    if not 0 < p < 65536:
        raise HostError(f"{text[:40]!r} is not a port number (1 to 65535)",
                        "the port is the number after -p in the console's login line")
    return p


def _ssh_config_lookup(alias: str) -> dict[str, Any] | None:
    """``alias``'s settings when a ``Host`` line of ~/.ssh/config names it as written."""
    path = Path.home() / ".ssh" / "config"
    if not path.is_file() or alias not in _host_names(path.read_text(errors="replace")):
        return None
    # isort: off
    import gpujob.transport.paramiko_load  # noqa: F401  (first: a `Match exec` line must not find invoke)
    import paramiko
    # isort: on

    cfg = paramiko.SSHConfig.from_path(str(path))
    try:
        return dict(cfg.lookup(alias))
    except ImportError:  # a `Match exec` line: paramiko runs it with invoke, which the SSH path keeps unloaded
        raise HostError(f"{path} has a `Match exec` line, which gpujob does not run",
                        'give the address itself: gpujob host add NAME --ssh "ssh -p PORT user@host"') from None


def _host_names(text: str) -> set[str]:
    """The patterns of an ssh_config's ``Host`` lines (paramiko's ``get_hostnames`` fails on a
    file with a ``Match`` block)."""
    names: set[str] = set()
    for line in text.splitlines():
        m = re.match(r"\s*host(?:\s*=\s*|\s+)(.+)", line, re.IGNORECASE)
        if m:
            names.update(m.group(1).replace('"', " ").split())
    return names


def detect_preset(hostname: str) -> str:
    """Guess the platform from the hostname (the instance can confirm it later)."""
    h = hostname.lower()
    if "seetacloud.com" in h or "autodl" in h:
        return "autodl"
    if "vast.ai" in h:
        return "vast"
    if "runpod" in h:
        return "runpod"
    return "generic"


STABLE_S = 2  # seconds hosts.yaml stays untouched before its JSON copy is made


class HostStore:
    """The profiles file (``hosts.yaml`` in the config folder, mode 0600)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or config_dir() / "hosts.yaml"

    def _load(self) -> dict[str, dict]:
        """The profiles, from a JSON copy while ``hosts.yaml`` is unchanged (same size, times and
        inode): importing and running the YAML parser is ~20 ms of every command. The copy is
        made only of a file left alone for ``STABLE_S`` seconds, so an edit within the same
        clock tick as the copy, same size, cannot pass for the old file."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return {}
        stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        cache = self.path.with_name(".hosts.yaml.json")
        try:
            doc = json.loads(cache.read_text())
            if doc["stamp"] == stamp and isinstance(doc["hosts"], dict):
                return doc["hosts"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        import yaml

        try:
            data = yaml.safe_load(self.path.read_text()) or {}
        except yaml.YAMLError as e:
            raise HostError(f"{self.path} is not valid YAML: {e}", "fix or delete that file, then add the host again") from None
        hosts = data.get("hosts", {}) if isinstance(data, dict) else {}
        try:
            text = json.dumps({"stamp": stamp, "hosts": hosts})
            stable = time.time_ns() - st.st_mtime_ns > STABLE_S * 1e9  # a later edit then gets a later mtime
            if stable and json.loads(text)["hosts"] == hosts:  # only what JSON gives back unchanged (no dates)
                write_private(cache, text)
        except (OSError, TypeError, ValueError):  # a read-only folder, or a value JSON cannot hold: parse next time
            pass
        return hosts

    def _change(self, edit: Callable[[dict[str, dict]], None]) -> None:
        """Apply ``edit`` to the profiles as they are now, under the file's lock, and write them back
        (remote/core/atomicfile.py): two gpujob processes changing profiles at once both keep their change."""
        import yaml

        with atomicfile().locked(self.path):
            data = dict(self._load())
            edit(data)
            write_private(self.path, yaml.safe_dump({"hosts": data}, sort_keys=True))

    def all(self) -> list[Host]:
        return [local_host()] + [self._make(n, d) for n, d in sorted(self._load().items())]

    def _make(self, name: str, d: dict) -> Host:
        known = {f.name for f in fields(Host)} - {"name"}
        if not isinstance(d, dict):
            raise HostError(f"{self.path}: host {name!r} is not a mapping of settings", "fix that entry or remove it")
        for key in d:
            if key not in known:  # a typo (prot: 2222) would silently connect to port 22; a note (added:) is kept
                import difflib

                swapped = [k for k in sorted(known) if sorted(k) == sorted(str(key))]  # prot → port, not root
                close = swapped or difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.75)
                if close:
                    raise HostError(f"{self.path}: host {name!r} has an unknown setting {str(key)!r} "
                                    f"(did you mean {close[0]!r}?)", f"fix it in {self.path}")
        from gpujob.config.hostdata import bad_kept

        dropped = bad_kept(d)
        if dropped:  # a host's answer kept here that fails the reply's checks: never fatal, said once
            d = {k: v for k, v in d.items() if k not in dropped}
            self._forget(name, dropped)
        host = Host(name=name, **{k: v for k, v in d.items() if k in known})
        host._merged_env = host.settings_env()  # type: ignore[attr-defined]
        host.env = {**host.env, **host._merged_env}  # type: ignore[attr-defined]  # submit sends host.env
        host._stored = (name, host.to_dict())  # type: ignore[attr-defined]  # what save() compares with (its changes)
        return host

    def _forget(self, name: str, dropped: dict[str, str]) -> None:
        """Remove kept host answers that failed the gate from the profile (said once: the next read has none)."""
        from gpujob.config.hostdata import warn_dropped

        warn_dropped(self.path, name, dropped)
        def edit(data: dict[str, dict]) -> None:
            if isinstance(data.get(name), dict):
                data[name] = {k: v for k, v in data[name].items() if k not in dropped}

        try:
            self._change(edit)  # under the file's lock: a host set made meanwhile stays
        except (OSError, HostError):  # a read-only config folder: ignored again next time
            pass

    def get(self, name: str | None, checked: bool = True) -> Host:
        """The profile ``name``; ``checked``: refused when a value is unsafe to use (``check_profile``)."""
        if not name or name == LOCAL:
            return local_host()
        data = self._load()
        if name not in data:
            import difflib

            close = difflib.get_close_matches(name, list(data) + [LOCAL], n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            known = ", ".join([LOCAL] + sorted(data))
            add = f"gpujob host add {name} --ssh \"ssh -p PORT root@HOST\"" if _HOST_NAME_RE.fullmatch(name) else "gpujob host add NAME --ssh ..."
            raise HostError(f"unknown host {name[:80]!r} (known: {known})", f"{hint}add it with: {add}")
        host = self._make(name, data[name])
        return check_profile(host) if checked else host

    def save(self, host: Host, new: bool = False) -> None:
        """Keep ``host``'s profile. A profile read from this store saves only what changed since it was
        read, over the profile as it is now: a submit that keeps its preflight's figures does not undo a
        ``host set`` made meanwhile. One made here (``host add``) replaces the entry; ``new``: refused
        when the name exists by then (two ``host add`` of one name at once)."""
        if host.name == LOCAL:
            raise HostError("'local' is built in and cannot be redefined", "pick another name")
        check_host_name(host.name)
        check_profile(host, "save")
        mine = host.to_dict()
        name, base = getattr(host, "_stored", (None, None))
        if name != host.name:  # a profile made here, or one read under another name and renamed
            base = None

        def edit(data: dict[str, dict]) -> None:
            cur = data.get(host.name)
            if new and cur is not None:
                raise HostError(f"host {host.name!r} exists", f"change it with gpujob host set {host.name} "
                                "--ssh \"...\", or add --force")
            if base is None or not isinstance(cur, dict):
                data[host.name] = mine
                return
            merged = dict(cur)
            for k in set(mine) | set(base):
                if mine.get(k) != base.get(k):  # this process changed it: its value wins
                    if k in mine:
                        merged[k] = mine[k]
                    else:
                        merged.pop(k, None)
            data[host.name] = merged

        self._change(edit)
        host._stored = (host.name, mine)  # type: ignore[attr-defined]

    def remove(self, name: str) -> None:
        if name == LOCAL:
            raise HostError("'local' is built in (this machine): it cannot be removed", "see gpujob host ls")

        def edit(data: dict[str, dict]) -> None:
            if name not in data:
                raise HostError(f"unknown host {name!r}", "see gpujob host ls")
            del data[name]

        self._change(edit)

    @contextmanager
    def first_use(self, name: str, what: str) -> Iterator[None]:
        """Hold host ``name``'s lock for ``what`` (``preflight``): of several commands that arrive
        at once, one does the work and the others wait, then find it done."""
        folder = state_dir() / "locks"
        folder.mkdir(mode=0o700, exist_ok=True)
        with atomicfile().locked(folder / f"{name}.{what}"):
            yield
