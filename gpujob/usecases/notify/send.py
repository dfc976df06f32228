"""Laptop side of notifications: ``gpujob notify test`` and a send from the laptop (the secrets the
channels need come from gpujob.usecases.secrets.file).

The bodies, signatures, retries, rate limits and redaction are those of ``remote/notify/``
(the agent's package); only the HTTP client differs (httpx here, urllib on the instance).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

from gpujob.bundle import import_remote
from gpujob.config.paths import config_dir
from gpujob.jsontypes import JSONObject
from gpujob.usecases.secrets.file import secrets_from_env

if TYPE_CHECKING:
    import httpx

notify = import_remote("notify")

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
    chans = [dict(c, name=n) for c, n in zip(every, notify.channel_names(every)) if isinstance(c, dict)]
    if not all_channels:
        chans = [c for c in chans if notify.wants(notify_cfg, str(event.get("event")), c)]
    if not chans:
        return []
    sdir = str(state_dir) if state_dir is not None else str(config_dir())
    import httpx  # here, not at the top: a tenth of a second, paid only when the laptop itself sends

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
    names = notify.channel_names(chans)
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
