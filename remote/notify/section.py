"""The ``notify:`` section of a job file: its checks, and which events go to which channel."""

from typing import Any, Container, Dict, List, Mapping, Optional, cast

from .base import CHANNELS, channel_type
from .redaction import secret_names

EVENTS = ("started", "succeeded", "failed", "restarted", "stopped", "autostopped", "lost", "gpu_error",
          "mirror_failing", "test", "disk_release")
# disk_release: the laptop's, a powered-off host's disk is released by its platform soon (gpujob/usecases/disks/)
DEFAULT_ON = ["succeeded", "failed", "autostopped", "lost", "gpu_error", "mirror_failing", "disk_release"]

_COMMON = ("type", "name", "on")


def validate_channels(cfg: Any, secrets: Optional[Dict[str, str]] = None) -> List[str]:
    """Problems in a ``notify:`` section, each naming the bad key (never a value). [] when fine.

    With ``secrets`` given, also reports every ``${NAME}`` that it lacks.
    """
    if cfg is None or cfg == {}:
        return []
    if not isinstance(cfg, dict):
        return ["notify: must be a mapping with 'channels' (and optionally 'on')"]
    errs = []  # type: List[str]
    for k in cfg:
        if k not in ("on", "channels"):
            errs.append("notify.%s: unknown key (expected 'on', 'channels')" % k)
    errs.extend(_check_on("notify.on", cfg.get("on")))
    chans = cfg.get("channels")
    if chans is None:
        chans = []
    if not isinstance(chans, list):
        return errs + ["notify.channels: must be a list"]
    names = set()  # type: set
    for i, ch in enumerate(chans):
        errs.extend(_check_channel(ch, "notify.channels[%d]" % i, names, secrets))
    return errs


def _check_channel(ch: Any, where: str, names: set, secrets: Optional[Dict[str, str]]) -> List[str]:
    if not isinstance(ch, dict):
        return ["%s: must be a mapping with a 'type'" % where]
    t = channel_type(ch)
    kind = CHANNELS.get(t)
    if kind is None:
        return ["%s.type: %r is not one of %s" % (where, ch.get("type"), ", ".join(sorted(CHANNELS)))]
    errs = []  # type: List[str]
    where = "%s (%s)" % (where, t)
    allowed = set(_COMMON) | set(kind.optional) | {k for group in kind.required for k in group}
    for k in ch:
        if k not in allowed:
            errs.append("%s.%s: unknown key (allowed: %s)" % (where, k, ", ".join(sorted(allowed))))
    for group in kind.required:
        if not any(ch.get(k) not in (None, "", []) for k in group):
            errs.append("%s.%s: required" % (where, " or ".join(group)))
    name = ch.get("name")
    if name is not None:
        if not isinstance(name, str) or not name:
            errs.append("%s.name: must be a non-empty string" % where)
        elif name in names:
            errs.append("%s.name: %r is used twice" % (where, name))
        names.add(name)
    errs.extend(_check_on(where + ".on", ch.get("on")))
    loose = {"on"}.union(*(c.non_string_keys for c in CHANNELS.values()))  # any kind's non-string keys
    for k, v in ch.items():
        if k in loose or v is None:
            continue
        if not isinstance(v, str):
            errs.append("%s.%s: must be a string" % (where, k))
    url = ch.get("url")
    if isinstance(url, str) and url and not url.startswith("${") and not url.startswith(("http://", "https://")):
        errs.append("%s.url: must start with http:// or https://" % where)
    errs.extend(kind.validate(ch, where))
    if secrets is not None:
        for n in secret_names({"channels": [ch]}):
            if n not in secrets:
                errs.append("%s: secret ${%s} is not set (environment or secrets file)" % (where, n))
    return errs


def _check_on(where: str, on: Any) -> List[str]:
    if on is None:
        return []
    if isinstance(on, str):
        on = [on]
    if not isinstance(on, list):
        return ["%s: must be a list of events" % where]
    return ["%s: %r is not one of %s" % (where, e, ", ".join(EVENTS)) for e in on if e not in EVENTS]


def wants(cfg: Optional[Mapping[str, object]], event_name: str, channel: Optional[Mapping[str, object]] = None) -> bool:
    """Whether ``event_name`` is to be sent (``test`` always is); a channel's own ``on`` wins."""
    if event_name == "test":
        return True
    on = None
    if channel is not None and channel.get("on") is not None:
        on = channel["on"]
    elif cfg and cfg.get("on") is not None:
        on = cfg["on"]
    if on is None:
        on = DEFAULT_ON
    if isinstance(on, str):
        on = [on]
    return event_name in cast(Container[object], on)  # a list once validated (_check_on)

