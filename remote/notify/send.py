"""Sending: one channel with retries (:func:`send_channel`), every channel of a list in turn
(:func:`send_all`), and the agent's one call (:func:`notify_event`). None of them raises."""

import time
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, TypedDict, cast

from remote.core import protocol

from .base import ChannelError, Transport, channel_type, kind_of
from .http_client import urllib_transport
from .redaction import all_sensitive, redact, redact_obj, resolve_channel
from .render import render
from .section import wants


class Outcome(TypedDict):
    """One channel's send, as :func:`send_all` describes it."""

    channel: str
    type: str
    ok: bool
    skipped: bool
    attempts: int
    status: Optional[int]
    error: Optional[str]
    elapsed_s: float


def channel_names(channels: Sequence[object]) -> List[str]:
    types = [channel_type(c) if isinstance(c, dict) else "?" for c in channels]
    out = []
    for i, c in enumerate(channels):
        if isinstance(c, dict) and c.get("name"):
            out.append(str(c["name"]))
        elif types.count(types[i]) > 1:
            out.append("%s[%d]" % (types[i], i))
        else:
            out.append(types[i])
    return out


def send_channel(channel: Mapping[str, object], title: str, text: str, event: Mapping[str, object],
                 secrets: Optional[Dict[str, str]], state_dir: Optional[str] = None, retries: int = 3,
                 backoff: float = 1.0, timeout: float = 10.0, transport: Optional[Transport] = None,
                 sleep: Callable[[float], None] = time.sleep) -> Outcome:
    """Send to one channel with retries; the (unredacted) outcome dict. Never raises."""
    t = channel_type(channel)
    out = {"channel": t, "type": t, "ok": False, "skipped": False, "attempts": 0,
           "status": None, "error": None, "elapsed_s": 0.0}  # type: Outcome
    start = time.monotonic()
    transport = transport or urllib_transport
    attempt = 0
    try:
        kind = kind_of(channel)
        if kind is None:
            raise ChannelError("unknown channel type %r" % channel.get("type"), final=True)
        resolved, _, missing = resolve_channel(channel, secrets)
        if missing:
            raise ChannelError("secret ${%s} is not set" % missing[0], final=True)
        while True:
            attempt += 1
            try:
                why = kind.skip_reason(resolved, state_dir)
                if why:
                    out["skipped"] = True
                    attempt -= 1
                    raise ChannelError(why, final=True)
                status = kind.deliver(channel, resolved, title, text, event, secrets, timeout, transport)
                if status is not None:
                    out["status"] = status
                out["ok"] = True
                out["error"] = None
                break
            except ChannelError as e:
                out["error"] = str(e)
                if e.status is not None:
                    out["status"] = e.status
                if e.final or attempt > retries:
                    break
                wait = protocol.backoff(attempt, backoff)
                if e.retry_after is not None:
                    wait = max(wait, min(e.retry_after, 60.0))
                sleep(wait)
    except ChannelError as e:
        out["error"] = str(e)
    except Exception as e:  # a bug must not reach the job
        out["error"] = "internal error: %s: %s" % (type(e).__name__, e)
    out["attempts"] = attempt
    out["elapsed_s"] = round(time.monotonic() - start, 3)
    return out


def send_all(channels: Sequence[object], event: Mapping[str, object], secrets: Optional[Dict[str, str]] = None,
             state_dir: Optional[str] = None, retries: int = 3, backoff: float = 1.0, timeout: float = 10.0,
             transport: Optional[Transport] = None, log: Optional[Callable[[str], None]] = None) -> List[Outcome]:
    """Send ``event`` to every channel in turn; one outcome dict per channel. Never raises.

    Outcome: ``channel`` (name), ``type``, ``ok``, ``skipped`` (rate-limited), ``attempts``,
    ``status`` (last HTTP status), ``error`` (redacted text or None), ``elapsed_s``.
    ``retries`` is the number of retries after the first attempt (exponential backoff from
    ``backoff`` seconds) on network errors, timeouts, 5xx and 429; other 4xx are final.
    """
    outcomes = []  # type: List[Outcome]
    try:
        channels = list(channels or [])
        sensitive = all_sensitive(channels, secrets)
        title, text = render(event)
        title, text = redact(title, sensitive), redact(text, sensitive)
        safe_event = redact_obj(dict(event), sensitive)
        names = channel_names(channels)
    except Exception as e:
        return [{"channel": "*", "type": "*", "ok": False, "skipped": False, "attempts": 0, "status": None,
                 "error": "internal error: %s" % type(e).__name__, "elapsed_s": 0.0}]
    for name, ch in zip(names, channels):
        if not isinstance(ch, dict):
            out = {"channel": name, "type": "?", "ok": False, "skipped": False, "attempts": 0,
                   "status": None, "error": "channel is not a mapping", "elapsed_s": 0.0}  # type: Outcome
        else:
            out = send_channel(ch, title, text, safe_event, secrets, state_dir, retries, backoff, timeout, transport)
        out["channel"] = name
        if out.get("error"):
            out["error"] = redact(out["error"], sensitive)
        outcomes.append(out)
        if log is not None:
            try:
                log(format_outcome(out, event.get("event")))
            except Exception:
                pass
    return outcomes


def format_outcome(out: Outcome, event_name: object = None) -> str:
    """One log line for an outcome (already redacted by send_all)."""
    head = "notify %s%s" % (out.get("channel"), (" (%s)" % event_name) if event_name else "")
    if out.get("ok"):
        return "%s: delivered (%d attempt%s)" % (head, out.get("attempts", 0), "" if out.get("attempts") == 1 else "s")
    if out.get("skipped"):
        return "%s: skipped, %s" % (head, out.get("error"))
    return "%s: failed after %d attempt%s: %s" % (head, out.get("attempts", 0),
                                                  "" if out.get("attempts") == 1 else "s", out.get("error"))


def notify_event(cfg: Optional[Mapping[str, object]], event: Mapping[str, object], secrets: Optional[Dict[str, str]] = None,
                 state_dir: Optional[str] = None, log: Optional[Callable[[str], None]] = None, retries: int = 3,
                 backoff: float = 1.0, timeout: float = 10.0,
                 transport: Optional[Transport] = None) -> List[Outcome]:
    """The agent's one call: send ``event`` to the channels of ``cfg`` (the spec's ``notify``)
    that want it (``on:`` of the channel, else of the section, else :data:`DEFAULT_ON`).
    Returns the outcomes (empty when nothing wants the event). Never raises."""
    try:
        every = list(cast(Iterable[object], (cfg or {}).get("channels") or []))  # a non-list: nothing sent
        names = channel_names(every)  # named over the whole list, so a channel's name is stable
        chans = [dict(c, name=n) for c, n in zip(every, names)
                 if isinstance(c, dict) and wants(cfg, str(event.get("event")), c)]
    except Exception:
        return []
    if not chans:
        return []
    return send_all(chans, event, secrets, state_dir, retries, backoff, timeout, transport, log)
