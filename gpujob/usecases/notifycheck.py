"""Laptop side of notifications: ``gpujob notify test`` and the secrets the channels need.

The bodies, signatures, retries, rate limits and redaction are those of ``remote/notify/``
(the agent's package); only the HTTP client differs (httpx here, urllib on the instance).
"""

from __future__ import annotations

import os
import socket
import stat
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

from gpujob.bundle import import_remote
from gpujob.config.paths import config_dir
from gpujob.jsontypes import JSONObject

if TYPE_CHECKING:
    import httpx

notify = import_remote("notify")

SECRETS_FILE_NAME = "secrets.env"


class InsecureSecretsFileWarning(UserWarning):
    """The secrets file can be read by the group or by others."""


def default_secrets_file() -> Path:
    """``secrets.env`` in the config folder (``$GPUJOB_CONFIG_DIR``, else ``~/.config/gpujob``)."""
    return config_dir() / SECRETS_FILE_NAME


def parse_dotenv(text: str) -> dict[str, str]:
    """``NAME=value`` lines (``export`` prefix, quotes, ``#`` comments and blank lines allowed)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            q, value = value[0], value[1:-1]
            if q == '"':
                value = value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
        else:
            hash_at = value.find(" #")
            if hash_at >= 0:
                value = value[:hash_at].rstrip()
        out[name] = value
    return out


def read_secrets_file(path: Path) -> dict[str, str]:
    """All entries of a dotenv-style secrets file; warns when group or others may read it."""
    st = path.stat()
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        warnings.warn(
            f"{path} is readable by group or others (mode {stat.S_IMODE(st.st_mode):o}); run: chmod 600 {path}",
            InsecureSecretsFileWarning,
            stacklevel=3,
        )
    return parse_dotenv(path.read_text(encoding="utf-8"))


def secrets_from_env(names: Iterable[str] | None, secrets_file: str | Path | None = None) -> dict[str, str]:
    """The values of ``names`` (all of the file's entries when None) from the environment, else the
    secrets file (``secrets_file`` or :func:`default_secrets_file` when it exists). Names found in
    neither are left out: ``notify.validate_channels(cfg, secrets)`` reports them."""
    path = Path(secrets_file).expanduser() if secrets_file else default_secrets_file()
    from_file: dict[str, str] = {}
    if path.is_file():
        from_file = read_secrets_file(path)
    elif secrets_file:
        raise FileNotFoundError(f"secrets file {path} does not exist")
    wanted = list(from_file) if names is None else list(dict.fromkeys(names))
    out: dict[str, str] = {}
    for n in wanted:
        if os.environ.get(n):
            out[n] = os.environ[n]
        elif n in from_file:
            out[n] = from_file[n]
    return out


def httpx_transport(client: httpx.Client) -> Callable[[Any, float], tuple[int, dict[str, str], bytes]]:
    """A transport for ``remote/notify/`` that POSTs with ``client``."""

    def post(req: Any, timeout: float) -> tuple[int, dict[str, str], bytes]:
        def exchange() -> tuple[int, dict[str, str], bytes]:
            with client.stream("POST", req.url, content=req.body, headers=dict(req.headers), timeout=timeout) as r:
                body = b""
                for chunk in r.iter_bytes():  # what the checks read of an answer: its first 64 KiB
                    body += chunk
                    if len(body) >= 65536:
                        break
                return r.status_code, dict(r.headers), body[:65536]

        # the whole answer within a bound, as on the agent: a server trickling a byte at a time ends too
        return notify.within(exchange, timeout * notify.WHOLE_ANSWER)

    return post


def make_test_event(job_id: str = "notify-test", name: str | None = None) -> JSONObject:
    """The event ``gpujob notify test`` sends."""
    return {
        "event": "test",
        "job_id": job_id,
        "name": name or "gpujob notify test",
        "host": socket.gethostname(),
        "duration_s": None,
        "cost": None,
        "currency": None,
        "metrics": {},
    }


def send_from_laptop(
    notify_cfg: Mapping[str, object] | None,
    event: Mapping[str, object],
    secrets: dict[str, str],
    *,
    all_channels: bool = False,
    retries: int = 1,
    backoff: float = 0.5,
    timeout: float = 10.0,
    state_dir: str | Path | None = None,
) -> list[JSONObject]:
    """Send ``event`` from the laptop (e.g. ``lost``, which the dead agent cannot send).

    Channels are filtered by ``on:`` unless ``all_channels``; returns the redacted outcomes.
    """
    every = list(cast(Iterable[object], (notify_cfg or {}).get("channels") or []))  # a list once validated
    chans = [dict(c, name=n) for c, n in zip(every, notify._channel_names(every)) if isinstance(c, dict)]
    if not all_channels:
        chans = [c for c in chans if notify.wants(notify_cfg, str(event.get("event")), c)]
    if not chans:
        return []
    sdir = str(state_dir) if state_dir is not None else str(config_dir())
    import httpx  # here, not at the top: every submit and sync reads the secrets file through this module

    with httpx.Client(follow_redirects=False, headers={"User-Agent": "gpujob"}) as client:
        return notify.send_all(
            chans, event, secrets, sdir, retries=retries, backoff=backoff, timeout=timeout,
            transport=httpx_transport(client),
        )


def notify_test(
    notify_cfg: Mapping[str, object] | None,
    secrets: dict[str, str],
    *,
    job_name: str | None = None,
    retries: int = 1,
    backoff: float = 0.5,
    timeout: float = 10.0,
    state_dir: str | Path | None = None,
) -> list[JSONObject]:
    """Send a ``test`` event to every channel of ``notify_cfg``; one outcome dict per channel.

    A config error of a channel (bad key, missing secret) comes back as that channel's failed
    outcome without sending. Outcome keys: channel, type, ok, skipped, attempts, status,
    error (redacted), elapsed_s.
    """
    chans = list(cast(Iterable[object], (notify_cfg or {}).get("channels") or []))  # a list once validated
    names = notify._channel_names(chans)
    sensitive = notify.all_sensitive(chans, secrets)
    errs = notify.validate_channels(notify_cfg, secrets)
    bad: dict[int, str] = {}
    for e in errs:
        for i in range(len(chans)):
            if e.startswith(f"notify.channels[{i}]"):
                bad.setdefault(i, e)
    good = [dict(cast(Mapping[str, object], c), name=names[i])  # a channel not in bad is a mapping (validated)
            for i, c in enumerate(chans) if i not in bad]
    sent = iter(
        send_from_laptop(
            {"channels": good}, make_test_event(name=job_name), secrets, all_channels=True, retries=retries,
            backoff=backoff, timeout=timeout, state_dir=state_dir,
        )
        if good
        else []
    )
    out: list[JSONObject] = []
    for i, ch in enumerate(chans):
        if i in bad:
            out.append({
                "channel": names[i], "type": notify.channel_type(ch) if isinstance(ch, dict) else "?", "ok": False,
                "skipped": True, "attempts": 0, "status": None, "error": notify.redact(bad[i], sensitive),
                "elapsed_s": 0.0,
            })
        else:
            out.append(next(sent))
    return out


def notify_test_job(job_file: str | None) -> list[JSONObject]:
    """``gpujob notify test``: a ``test`` event to every channel of the job file, with the secrets it names."""
    from gpujob.config.spec import load_spec
    from gpujob.errors import GpujobError

    spec = load_spec(job_file)
    if not (spec.notify or {}).get("channels"):
        raise GpujobError(f"{spec.source} has no notify channels", "add notify: {channels: [...]} (see docs/notifications.md)")
    return notify_test(spec.notify, secrets_from_env(notify.secret_names(spec.notify)), job_name=spec.name)
