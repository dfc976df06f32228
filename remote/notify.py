"""Notification channels, sent by the agent (standard library only, Python 3.8+).

One call from the agent::

    outcomes = notify.notify_event(spec.get("notify"), event, secrets, state_dir, log=log)

It never raises and never blocks longer than the retries of each channel. Channels: generic JSON
``webhook`` (HMAC-SHA256 signature when a secret is set), ``slack``, ``discord``, ``wecom``
(WeCom group robot), ``dingtalk`` (signed), ``feishu``/``lark`` (signed), ``serverchan``,
``autodl`` (AutoDL WeChat push, rate-limited client-side) and ``email`` (SMTP).

Config values written ``${NAME}`` are taken from ``secrets`` (the agent's 0600 secrets file);
a literal value at a secret key works too and is treated as a secret. Every error text,
outcome and log line goes through :func:`redact`; so do the messages themselves.
"""

import base64
import hashlib
import hmac
import json
import os
import re
import smtplib
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import namedtuple
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

EVENTS = ("started", "succeeded", "failed", "restarted", "stopped", "autostopped", "lost", "test")
DEFAULT_ON = ["succeeded", "failed", "autostopped", "lost"]

AUTODL_URL = "https://www.autodl.com/api/v1/wechat/message/send"
AUTODL_PER_MINUTE = 5
AUTODL_PER_DAY = 50

REDACTED = "***"
MIN_SECRET_LEN = 4  # shorter values are not searched for in text (they would match everywhere)

_COMMON = ("type", "name", "on")
# type -> (required keys (a tuple = one of), optional keys, secret keys)
_SPEC = {
    "webhook": ((("url",),), ("secret", "headers"), ("url", "secret", "headers")),
    "slack": ((("url",),), (), ("url",)),
    "discord": ((("url",),), ("username",), ("url",)),
    "wecom": ((("url", "key"),), ("msgtype",), ("url", "key")),
    "dingtalk": ((("url", "access_token"),), ("secret", "keyword", "msgtype"), ("url", "access_token", "secret")),
    "feishu": ((("url",),), ("secret",), ("url", "secret")),
    "serverchan": ((("sendkey", "url"),), ("sendkey", "url"), ("sendkey",)),
    "autodl": ((("token",),), ("url",), ("token",)),
    "email": (
        (("host",), ("to",)),
        ("port", "user", "password", "starttls", "ssl", "from", "timeout"),
        ("password",),
    ),
}
_ALIASES = {"lark": "feishu", "wechat": "autodl", "autodl_wechat": "autodl", "smtp": "email", "generic": "webhook"}
_URL_IS_SECRET = ("webhook", "slack", "discord", "wecom", "dingtalk", "feishu", "serverchan")

_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

Request = namedtuple("Request", "url headers body")
Transport = Callable[[Request, float], Tuple[int, Dict[str, str], bytes]]


class ChannelError(Exception):
    """A send that failed; ``final`` means retrying will not help."""

    def __init__(self, message: str, final: bool = False, status: Optional[int] = None,
                 retry_after: Optional[float] = None):
        super().__init__(message)
        self.final = final
        self.status = status
        self.retry_after = retry_after


# ----------------------------------------------------------------------------- secrets, redaction


def channel_type(ch: Dict[str, Any]) -> str:
    """The canonical type of a channel config (aliases such as ``lark`` resolved)."""
    t = str(ch.get("type", "")).strip().lower()
    return _ALIASES.get(t, t)


def secret_names(cfg: Optional[Dict[str, Any]]) -> List[str]:
    """Every ``${NAME}`` the notify config refers to (what the laptop must put in the secrets file)."""
    names = []  # type: List[str]

    def walk(v: Any) -> None:
        if isinstance(v, str):
            for n in _REF.findall(v):
                if n not in names:
                    names.append(n)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    walk((cfg or {}).get("channels") or [])
    return names


def _subst(value: Any, secrets: Dict[str, str], missing: List[str]) -> Any:
    if isinstance(value, str):
        def rep(m: "re.Match") -> str:
            name = m.group(1)
            if name not in secrets:
                missing.append(name)
                return ""
            return str(secrets[name])
        return _REF.sub(rep, value)
    if isinstance(value, dict):
        return {k: _subst(v, secrets, missing) for k, v in value.items()}
    if isinstance(value, list):
        return [_subst(v, secrets, missing) for v in value]
    return value


def resolve_channel(ch: Dict[str, Any], secrets: Optional[Dict[str, str]]) -> Tuple[Dict[str, Any], List[str], List[str]]:
    """(channel with ``${NAME}`` substituted, its sensitive values, names of missing secrets)."""
    secrets = secrets or {}
    missing = []  # type: List[str]
    resolved = _subst(dict(ch), secrets, missing)
    sensitive = []  # type: List[str]
    for name in secret_names({"channels": [ch]}):
        if name in secrets:
            sensitive.append(str(secrets[name]))
    spec = _SPEC.get(channel_type(ch))
    for key in (spec[2] if spec else ()):
        v = resolved.get(key)
        if isinstance(v, dict):
            sensitive.extend(str(x) for x in v.values() if x)
        elif v:
            sensitive.append(str(v))
    return resolved, sensitive, missing


def externalize_secrets(cfg: Optional[Dict[str, Any]], prefix: str = "GPUJOB_NOTIFY") -> Tuple[Dict[str, Any], Dict[str, str]]:
    """Move literal values at secret keys out of a notify config.

    Returns (config with each literal replaced by ``${PREFIX_<i>_<KEY>}``, {name: value}), so
    the config can go to spec.json and the values to the 0600 secrets file.
    """
    if not cfg:
        return {}, {}
    out = dict(cfg)
    found = {}  # type: Dict[str, str]
    chans = []
    for i, ch in enumerate(cfg.get("channels") or []):
        if not isinstance(ch, dict):
            chans.append(ch)
            continue
        ch = dict(ch)
        spec = _SPEC.get(channel_type(ch))
        for key in (spec[2] if spec else ()):
            v = ch.get(key)
            if isinstance(v, dict):
                nv = {}
                for hk, hv in v.items():
                    if isinstance(hv, str) and hv and "${" not in hv:
                        name = "%s_%d_%s_%s" % (prefix, i, key.upper(), re.sub(r"\W", "_", str(hk)).upper())
                        found[name] = hv
                        hv = "${%s}" % name
                    nv[hk] = hv
                ch[key] = nv
            elif isinstance(v, str) and v and "${" not in v:
                name = "%s_%d_%s" % (prefix, i, key.upper())
                found[name] = v
                ch[key] = "${%s}" % name
        chans.append(ch)
    out["channels"] = chans
    return out, found


def _variants(value: str) -> List[str]:
    """The forms a secret may take in text: itself, URL-quoted, and for URLs their path and query."""
    out = [value, urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value)]
    if value.startswith(("http://", "https://")):
        p = urllib.parse.urlsplit(value)
        rest = value[len("%s://%s" % (p.scheme, p.netloc)):]
        if len(rest) > 1:
            out.append(rest)
        if p.query:
            out.append(p.query)
        for part in p.path.split("/") + [v for _, v in urllib.parse.parse_qsl(p.query)]:
            if _token_like(part):
                out.append(part)
    return out


def _token_like(part: str) -> bool:
    """A URL piece that looks like a key (not a word such as ``services`` or ``webhooks``)."""
    return len(part) >= 16 or (len(part) >= 8 and any(c.isdigit() for c in part) and any(c.isalpha() for c in part))


def redact(text: Any, secrets: Any) -> str:
    """``text`` with every secret value (a dict's values or an iterable of strings) replaced by ``***``.

    A secret-bearing URL becomes ``scheme://host/***``; URL-quoted forms and the URL's path,
    query and long path segments are hidden as well. Values shorter than 4 characters are
    not searched for.
    """
    s = "" if text is None else str(text)
    vals = secrets.values() if isinstance(secrets, dict) else (secrets or ())
    pats = set()
    for v in vals:
        if v is None:
            continue
        v = str(v)
        if len(v) < MIN_SECRET_LEN:
            continue
        if v.startswith(("http://", "https://")):
            p = urllib.parse.urlsplit(v)
            s = s.replace(v, "%s://%s/%s" % (p.scheme, p.netloc, REDACTED))
        for x in _variants(v):
            if len(x) >= MIN_SECRET_LEN:
                pats.add(x)
    for x in sorted(pats, key=len, reverse=True):
        s = s.replace(x, REDACTED)
    return s


def _redact_obj(obj: Any, secrets: Iterable[str]) -> Any:
    if isinstance(obj, str):
        return redact(obj, secrets)
    if isinstance(obj, dict):
        return {k: _redact_obj(v, secrets) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_redact_obj(v, secrets) for v in obj]
    return obj


# ----------------------------------------------------------------------------- validation


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
    names = set()
    for i, ch in enumerate(chans):
        where = "notify.channels[%d]" % i
        if not isinstance(ch, dict):
            errs.append("%s: must be a mapping with a 'type'" % where)
            continue
        t = channel_type(ch)
        if t not in _SPEC:
            errs.append("%s.type: %r is not one of %s" % (where, ch.get("type"), ", ".join(sorted(_SPEC))))
            continue
        where = "%s (%s)" % (where, t)
        req, opt, _ = _SPEC[t]
        allowed = set(_COMMON) | set(opt) | {k for group in req for k in group}
        for k in ch:
            if k not in allowed:
                errs.append("%s.%s: unknown key (allowed: %s)" % (where, k, ", ".join(sorted(allowed))))
        for group in req:
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
        for k, v in ch.items():
            if k in ("on", "to", "headers", "port", "starttls", "ssl", "timeout") or v is None:
                continue
            if not isinstance(v, str):
                errs.append("%s.%s: must be a string" % (where, k))
        url = ch.get("url")
        if isinstance(url, str) and url and not url.startswith("${") and not url.startswith(("http://", "https://")):
            errs.append("%s.url: must start with http:// or https://" % where)
        if t == "webhook" and ch.get("headers") is not None:
            h = ch["headers"]
            if not isinstance(h, dict) or not all(isinstance(v, str) for v in h.values()):
                errs.append("%s.headers: must be a mapping of strings" % where)
        if t in ("wecom", "dingtalk") and ch.get("msgtype") not in (None, "markdown", "text"):
            errs.append("%s.msgtype: must be 'markdown' or 'text'" % where)
        if t == "email":
            to = ch.get("to")
            if isinstance(to, str):
                to = [to]
            if to is not None and (not isinstance(to, list) or not all(isinstance(x, str) and "@" in x for x in to)):
                errs.append("%s.to: must be an address or a list of addresses" % where)
            port = ch.get("port")
            if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
                errs.append("%s.port: must be a port number" % where)
            if ch.get("starttls") not in (None, True, False, "auto"):
                errs.append("%s.starttls: must be true, false or auto" % where)
            if ch.get("ssl") not in (None, True, False):
                errs.append("%s.ssl: must be true or false" % where)
            if ch.get("ssl") is True and ch.get("starttls") is True:
                errs.append("%s.starttls: cannot be combined with ssl: true" % where)
            if ch.get("password") and not ch.get("user"):
                errs.append("%s.user: required when a password is given" % where)
            tmo = ch.get("timeout")
            if tmo is not None and (isinstance(tmo, bool) or not isinstance(tmo, (int, float)) or not 0 < tmo <= 3600):
                errs.append("%s.timeout: must be a number of seconds from 0 to 3600" % where)
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


def wants(cfg: Optional[Dict[str, Any]], event_name: str, channel: Optional[Dict[str, Any]] = None) -> bool:
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
    return event_name in on


# ----------------------------------------------------------------------------- rendering

_VERB = {
    "started": ("\u25b6\ufe0f", "started"),
    "succeeded": ("\u2705", "succeeded"),
    "failed": ("\u274c", "failed"),
    "restarted": ("\U0001f501", "restarted"),
    "stopped": ("\u23f9\ufe0f", "stopped"),
    "autostopped": ("\u23f9\ufe0f", "auto-stopped"),
    "lost": ("\u26a0\ufe0f", "lost contact"),
    "test": ("\U0001f514", "test notification"),
}


def _fmt_duration(s: Any) -> str:
    try:
        s = int(round(float(s)))
    except (TypeError, ValueError):
        return str(s)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return "%dh %02dm" % (h, m)
    if m:
        return "%dm %02ds" % (m, sec)
    return "%ds" % sec


def _fmt_num(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, float):
        return str(v)
    if v != v or v in (float("inf"), float("-inf")):
        return str(v)
    return "%.4g" % v


def render(event: Dict[str, Any]) -> Tuple[str, str]:
    """(title, text) of an event: plain text, the log tail last inside a ``` fence."""
    kind = str(event.get("event", "test"))
    icon, verb = _VERB.get(kind, ("", kind))
    who = event.get("name") or event.get("job_id") or "job"
    title = ("%s gpujob: %s %s" % (icon, who, verb)).strip()
    lines = []
    job = str(event.get("name") or "")
    if event.get("job_id") and event.get("job_id") != job:
        job = ("%s (%s)" % (job, event["job_id"])) if job else str(event["job_id"])
    if job:
        lines.append("Job: %s" % job)
    if event.get("host"):
        lines.append("Host: %s" % event["host"])
    lines.append("Status: %s" % verb)
    if event.get("duration_s") is not None:
        lines.append("Duration: %s" % _fmt_duration(event["duration_s"]))
    if event.get("cost") is not None:
        try:
            cost = "%.2f" % float(event["cost"])
        except (TypeError, ValueError):
            cost = str(event["cost"])
        lines.append("Cost: %s %s" % (cost, event.get("currency") or ""))
    for key, label in (("reason", "Reason"), ("diagnosis", "Diagnosis"), ("remedy", "Remedy")):
        if event.get(key):
            lines.append("%s: %s" % (label, event[key]))
    metrics = event.get("metrics") or {}
    if isinstance(metrics, dict) and metrics:
        items = ["%s=%s" % (k, _fmt_num(v)) for k, v in list(metrics.items())[:16]]
        lines.append("Metrics: %s" % ", ".join(items))
    if event.get("tb_url"):
        lines.append("TensorBoard: %s" % event["tb_url"])
    if kind == "test":
        lines.append("This is a test message from gpujob: the channel works.")
    tail = event.get("log_tail") or []
    if tail:
        lines.append("Last %d log lines:" % len(tail))
        lines.append("```")
        lines.extend(str(x).rstrip("\n").replace("```", "'''") for x in tail[-20:])
        lines.append("```")
    return title.strip(), "\n".join(lines)


def _fit(text: str, limit: int, in_bytes: bool = False) -> str:
    """``text`` cut to ``limit`` characters (or UTF-8 bytes) keeping its head and its tail."""
    size = (lambda s: len(s.encode("utf-8"))) if in_bytes else len
    if size(text) <= limit:
        return text
    if limit < 100:
        while size(text) > limit - 1 and text:
            text = text[:-1]
        return text + "\u2026"
    mark = "\n\u2026(truncated)\u2026\n"
    budget = limit - size(mark)
    head_n, tail_n = int(budget * 0.4), budget - int(budget * 0.4)
    head, tail = text[:head_n], text[-tail_n:] if tail_n > 0 else ""
    while size(head) > budget * 0.4 and head:
        head = head[:-max(1, len(head) // 20)]
    while size(tail) > budget - size(head) and tail:
        tail = tail[max(1, len(tail) // 20):]
    return head + mark + tail


# ----------------------------------------------------------------------------- requests


def _json(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _add_query(url: str, params: Dict[str, str]) -> str:
    return url + ("&" if "?" in url else "?") + urllib.parse.urlencode(params)


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """DingTalk's signature, already URL-encoded: urlencode(base64(HmacSHA256(secret, "ts\\nsecret")))."""
    msg = ("%d\n%s" % (timestamp_ms, secret)).encode("utf-8")
    digest = hmac.new(secret.encode("utf-8"), msg, hashlib.sha256).digest()
    return urllib.parse.quote_plus(base64.b64encode(digest).decode("ascii"))


def feishu_sign(secret: str, timestamp_s: int) -> str:
    """Feishu/Lark's signature: base64(HmacSHA256(key="ts\\nsecret", msg=b""))."""
    key = ("%d\n%s" % (timestamp_s, secret)).encode("utf-8")
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode("ascii")


def webhook_signature(secret: str, body: bytes) -> str:
    """The generic webhook's ``X-Gpujob-Signature`` value: ``sha256=<hex HMAC-SHA256(secret, body)>``."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def serverchan_url(sendkey: str) -> str:
    """ServerChan Turbo (``SCT...``) or ServerChan3 (``sctp<uid>t...``) endpoint for a SendKey."""
    m = re.match(r"^sctp(\d+)t", sendkey)
    if m:
        return "https://%s.push.ft07.com/send/%s.send" % (m.group(1), sendkey)
    return "https://sctapi.ftqq.com/%s.send" % sendkey


def build_request(channel: Dict[str, Any], title: str, text: str, event: Dict[str, Any],
                  secrets: Optional[Dict[str, str]] = None, now: Optional[float] = None) -> Request:
    """The HTTP request for one channel (``${NAME}`` resolved from ``secrets``); POST always."""
    ch, _, missing = resolve_channel(channel, secrets)
    if missing:
        raise ChannelError("secret ${%s} is not set" % missing[0], final=True)
    t = channel_type(ch)
    now = time.time() if now is None else now
    jh = {"Content-Type": "application/json; charset=utf-8"}
    if t == "slack":
        body = {"text": _fit("*%s*\n%s" % (title, text), 39000)}
        return Request(ch["url"], jh, _json(body))
    if t == "discord":
        body = {"content": _fit("**%s**\n%s" % (title, text), 2000)}
        if ch.get("username"):
            body["username"] = ch["username"]
        return Request(ch["url"], jh, _json(body))
    if t == "wecom":
        url = ch.get("url") or "https://qyapi.weixin.qq.com/cgi-bin/webhook/send"
        if ch.get("key") and "key=" not in url:
            url = _add_query(url, {"key": ch["key"]})
        if ch.get("msgtype") == "text":
            body = {"msgtype": "text", "text": {"content": _fit("%s\n%s" % (title, text), 2048, True)}}
        else:
            md = "### %s\n%s" % (title, text.replace("```\n", "").replace("\n```", ""))
            body = {"msgtype": "markdown", "markdown": {"content": _fit(md, 4096, True)}}
        return Request(url, jh, _json(body))
    if t == "dingtalk":
        url = ch.get("url") or "https://oapi.dingtalk.com/robot/send"
        if ch.get("access_token") and "access_token=" not in url:
            url = _add_query(url, {"access_token": ch["access_token"]})
        if ch.get("secret"):
            ts = int(now * 1000)
            url = url + ("&" if "?" in url else "?") + "timestamp=%d&sign=%s" % (ts, dingtalk_sign(ch["secret"], ts))
        kw = ch.get("keyword")
        if kw and kw not in title and kw not in text:
            title = "[%s] %s" % (kw, title)
        if ch.get("msgtype") == "text":
            body = {"msgtype": "text", "text": {"content": _fit("%s\n%s" % (title, text), 18000, True)}}
        else:
            md = "#### %s\n\n%s" % (title, "  \n".join(x for x in text.split("\n") if x != "```"))
            body = {"msgtype": "markdown", "markdown": {"title": title, "text": _fit(md, 18000, True)}}
        return Request(url, jh, _json(body))
    if t == "feishu":
        body = {"msg_type": "text", "content": {"text": _fit("%s\n%s" % (title, text), 18000, True)}}
        if ch.get("secret"):
            ts = int(now)
            body = {"timestamp": str(ts), "sign": feishu_sign(ch["secret"], ts), **body}
        return Request(ch["url"], jh, _json(body))
    if t == "serverchan":
        url = ch.get("url") or serverchan_url(ch["sendkey"])
        form = urllib.parse.urlencode({"title": _fit(title, 32), "desp": _fit(text, 30000)}).encode("ascii")
        return Request(url, {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}, form)
    if t == "autodl":
        url = ch.get("url") or AUTODL_URL
        name = event.get("name") or event.get("job_id") or "gpujob"
        body = {"title": _fit(title, 64), "name": _fit(str(name), 64), "content": _fit(text, 4000)}
        return Request(url, {"Authorization": ch["token"], **jh}, _json(body))
    if t == "webhook":
        ts = int(now)
        payload = dict(event)
        payload.update({"title": title, "text": text, "timestamp": ts, "source": "gpujob"})
        raw = _json(payload)
        headers = dict(jh)
        headers.update({str(k): str(v) for k, v in (ch.get("headers") or {}).items()})
        headers["X-Gpujob-Timestamp"] = str(ts)
        headers["X-Gpujob-Event"] = str(event.get("event", ""))
        if ch.get("secret"):
            headers["X-Gpujob-Signature"] = webhook_signature(ch["secret"], raw)
        return Request(ch["url"], headers, raw)
    raise ChannelError("channel type %r has no HTTP request" % t, final=True)


def check_response(channel_type_: str, status: int, headers: Dict[str, str], body: bytes) -> None:
    """Raise :class:`ChannelError` unless the response means delivered (HTTP and platform code)."""
    text = body[:2000].decode("utf-8", "replace")
    if status == 429 or status >= 500:
        ra = None
        for k, v in (headers or {}).items():
            if k.lower() == "retry-after":
                try:
                    ra = float(v)
                except ValueError:
                    ra = None
        raise ChannelError("HTTP %d: %s" % (status, text[:200]), status=status, retry_after=ra)
    if not 200 <= status < 300:
        raise ChannelError("HTTP %d: %s" % (status, text[:200]), final=True, status=status)
    t = _ALIASES.get(channel_type_, channel_type_)
    if t in ("wecom", "dingtalk", "feishu", "serverchan", "autodl"):
        try:
            data = json.loads(text) if text.strip() else {}
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ChannelError("HTTP %d but the answer is not JSON: %s" % (status, text[:200]), final=True, status=status)
        if t in ("wecom", "dingtalk"):
            code, msg = data.get("errcode", 0), data.get("errmsg")
        elif t == "feishu":
            code = data.get("code", data.get("StatusCode", 0))
            msg = data.get("msg", data.get("StatusMessage"))
        elif t == "serverchan":
            code, msg = data.get("code", 0), data.get("message")
        else:
            code, msg = data.get("code"), data.get("msg")
            if code == "Success":
                code = 0
        if code not in (0, "0"):
            raise ChannelError("refused by %s: code %s: %s" % (t, code, msg), final=True, status=status)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer (3xx, final), never a silent re-send as GET."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[override]
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)  # keeps the environment's proxy settings


def urllib_transport(req: Request, timeout: float) -> Tuple[int, Dict[str, str], bytes]:
    """POST with urllib: (status, headers, body) for any HTTP answer; raises on network errors."""
    r = urllib.request.Request(req.url, data=req.body, headers=dict(req.headers, **{"User-Agent": "gpujob-agent"}),
                               method="POST")
    try:
        with _OPENER.open(r, timeout=timeout) as resp:
            return resp.status, dict(resp.headers.items()), resp.read(65536)
    except urllib.error.HTTPError as e:
        try:
            body = e.read(65536)
        except Exception:
            body = b""
        return e.code, dict(e.headers.items()) if e.headers else {}, body


# ----------------------------------------------------------------------------- e-mail


def send_email(channel: Dict[str, Any], title: str, text: str, timeout: float = 10.0) -> None:
    """Send one mail (``channel`` already resolved). SSL on port 465 or ``ssl: true``; STARTTLS
    when ``starttls: true`` or, with ``auto`` (the default), when the server offers it; a
    password is never sent in clear unless ``starttls: false`` says so."""
    host = channel["host"]
    use_ssl = channel.get("ssl")
    port = int(channel.get("port") or (465 if use_ssl else 587))
    if use_ssl is None:
        use_ssl = port == 465
    starttls = channel.get("starttls", "auto")
    to = channel["to"]
    to = [to] if isinstance(to, str) else list(to)
    user = channel.get("user")
    sender = channel.get("from") or user or "gpujob@%s" % socket.gethostname()
    msg = EmailMessage()
    msg["Subject"] = title
    msg["From"] = sender
    msg["To"] = ", ".join(to)
    msg["Date"] = formatdate(localtime=True)
    msg["Message-ID"] = make_msgid(domain="gpujob")
    msg.set_content(text)
    timeout = float(channel.get("timeout") or timeout)
    ctx = ssl.create_default_context()
    try:
        if use_ssl:
            smtp = smtplib.SMTP_SSL(host, port, timeout=timeout, context=ctx)  # type: smtplib.SMTP
        else:
            smtp = smtplib.SMTP(host, port, timeout=timeout)
    except (OSError, smtplib.SMTPException) as e:
        raise ChannelError("SMTP connect to %s:%d failed: %s" % (host, port, e)) from e
    try:
        smtp.ehlo()
        secure = bool(use_ssl)
        if not use_ssl and starttls is not False:
            if smtp.has_extn("starttls"):
                smtp.starttls(context=ctx)
                smtp.ehlo()
                secure = True
            elif starttls is True:
                raise ChannelError("SMTP server %s offers no STARTTLS (starttls: true)" % host, final=True)
        if user:
            if not secure and starttls is not False:
                raise ChannelError("SMTP server %s offers no TLS; refusing to send the password in clear "
                                   "(set starttls: false to allow it)" % host, final=True)
            smtp.login(user, channel.get("password") or "")
        smtp.send_message(msg, from_addr=sender, to_addrs=to)
    except ChannelError:
        raise
    except smtplib.SMTPAuthenticationError as e:
        raise ChannelError("SMTP login refused: %s %s" % (e.smtp_code, _b2s(e.smtp_error)), final=True) from e
    except smtplib.SMTPResponseException as e:
        raise ChannelError("SMTP %s %s" % (e.smtp_code, _b2s(e.smtp_error)), final=500 <= e.smtp_code < 600) from e
    except smtplib.SMTPRecipientsRefused as e:
        raise ChannelError("SMTP recipients refused: %s" % e, final=True) from e
    except (OSError, smtplib.SMTPException) as e:
        raise ChannelError("SMTP error: %s" % e) from e
    finally:
        try:
            smtp.quit()
        except Exception:
            try:
                smtp.close()
            except Exception:
                pass


def _b2s(b: Any) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)


# ----------------------------------------------------------------------------- AutoDL rate limit


def _rate_take(state_dir: Optional[str], key: str, now: float) -> Optional[str]:
    """Record one AutoDL send, or say why not (5 a minute, 50 a rolling day), in a small state file."""
    path = os.path.join(state_dir, "notify_autodl_rate.json") if state_dir else None
    data = {}  # type: Dict[str, List[float]]
    if path:
        try:
            with open(path) as f:
                data = json.load(f)
            if not isinstance(data, dict):
                data = {}
        except (OSError, ValueError):
            data = {}
    else:
        data = _MEM_RATE
    stamps = [float(x) for x in data.get(key, []) if isinstance(x, (int, float)) and now - float(x) < 86400]
    if sum(1 for x in stamps if now - x < 60) >= AUTODL_PER_MINUTE:
        return "rate-limited (AutoDL allows %d a minute)" % AUTODL_PER_MINUTE
    if len(stamps) >= AUTODL_PER_DAY:
        return "rate-limited (AutoDL allows %d a day)" % AUTODL_PER_DAY
    stamps.append(now)
    data[key] = stamps
    if path:
        try:
            os.makedirs(state_dir, exist_ok=True)
            tmp = path + ".tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        except OSError:
            pass
    return None


_MEM_RATE = {}  # type: Dict[str, List[float]]


# ----------------------------------------------------------------------------- sending


def _channel_names(channels: List[Dict[str, Any]]) -> List[str]:
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


def all_sensitive(channels: Iterable[Any], secrets: Optional[Dict[str, str]]) -> List[str]:
    """Every value to hide: the secrets' values and each channel's secret-bearing values."""
    vals = [str(v) for v in (secrets or {}).values() if v]
    for ch in channels:
        if isinstance(ch, dict):
            vals.extend(resolve_channel(ch, secrets)[1])
    return vals


def send_channel(channel: Dict[str, Any], title: str, text: str, event: Dict[str, Any],
                 secrets: Optional[Dict[str, str]], state_dir: Optional[str] = None, retries: int = 3,
                 backoff: float = 1.0, timeout: float = 10.0, transport: Optional[Transport] = None,
                 sleep: Callable[[float], None] = time.sleep) -> Dict[str, Any]:
    """Send to one channel with retries; the (unredacted) outcome dict. Never raises."""
    t = channel_type(channel)
    out = {"channel": t, "type": t, "ok": False, "skipped": False, "attempts": 0,
           "status": None, "error": None}  # type: Dict[str, Any]
    start = time.monotonic()
    transport = transport or urllib_transport
    attempt = 0
    try:
        if t not in _SPEC:
            raise ChannelError("unknown channel type %r" % channel.get("type"), final=True)
        resolved, _, missing = resolve_channel(channel, secrets)
        if missing:
            raise ChannelError("secret ${%s} is not set" % missing[0], final=True)
        while True:
            attempt += 1
            try:
                if t == "autodl":
                    key = hashlib.sha256(str(resolved.get("token")).encode()).hexdigest()[:16]
                    why = _rate_take(state_dir, key, time.time())
                    if why:
                        out["skipped"] = True
                        attempt -= 1
                        raise ChannelError(why, final=True)
                if t == "email":
                    send_email(resolved, title, text, timeout)
                else:
                    req = build_request(channel, title, text, event, secrets)
                    try:
                        status, headers, body = transport(req, timeout)
                    except Exception as e:
                        raise ChannelError("%s: %s" % (type(e).__name__, e)) from e
                    out["status"] = status
                    check_response(t, status, headers, body)
                out["ok"] = True
                out["error"] = None
                break
            except ChannelError as e:
                out["error"] = str(e)
                if e.status is not None:
                    out["status"] = e.status
                if e.final or attempt > retries:
                    break
                wait = backoff * (2 ** (attempt - 1))
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


def send_all(channels: List[Dict[str, Any]], event: Dict[str, Any], secrets: Optional[Dict[str, str]] = None,
             state_dir: Optional[str] = None, retries: int = 3, backoff: float = 1.0, timeout: float = 10.0,
             transport: Optional[Transport] = None, log: Optional[Callable[[str], None]] = None) -> List[Dict[str, Any]]:
    """Send ``event`` to every channel in turn; one outcome dict per channel. Never raises.

    Outcome: ``channel`` (name), ``type``, ``ok``, ``skipped`` (rate-limited), ``attempts``,
    ``status`` (last HTTP status), ``error`` (redacted text or None), ``elapsed_s``.
    ``retries`` is the number of retries after the first attempt (exponential backoff from
    ``backoff`` seconds) on network errors, timeouts, 5xx and 429; other 4xx are final.
    """
    outcomes = []  # type: List[Dict[str, Any]]
    try:
        channels = list(channels or [])
        sensitive = all_sensitive(channels, secrets)
        title, text = render(event)
        title, text = redact(title, sensitive), redact(text, sensitive)
        safe_event = _redact_obj(dict(event), sensitive)
        names = _channel_names(channels)
    except Exception as e:
        return [{"channel": "*", "type": "*", "ok": False, "skipped": False, "attempts": 0, "status": None,
                 "error": "internal error: %s" % type(e).__name__, "elapsed_s": 0.0}]
    for name, ch in zip(names, channels):
        if not isinstance(ch, dict):
            out = {"channel": name, "type": "?", "ok": False, "skipped": False, "attempts": 0,
                   "status": None, "error": "channel is not a mapping", "elapsed_s": 0.0}
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


def format_outcome(out: Dict[str, Any], event_name: Any = None) -> str:
    """One log line for an outcome (already redacted by send_all)."""
    head = "notify %s%s" % (out.get("channel"), (" (%s)" % event_name) if event_name else "")
    if out.get("ok"):
        return "%s: delivered (%d attempt%s)" % (head, out.get("attempts", 0), "" if out.get("attempts") == 1 else "s")
    if out.get("skipped"):
        return "%s: skipped, %s" % (head, out.get("error"))
    return "%s: failed after %d attempt%s: %s" % (head, out.get("attempts", 0),
                                                  "" if out.get("attempts") == 1 else "s", out.get("error"))


def notify_event(cfg: Optional[Dict[str, Any]], event: Dict[str, Any], secrets: Optional[Dict[str, str]] = None,
                 state_dir: Optional[str] = None, log: Optional[Callable[[str], None]] = None, retries: int = 3,
                 backoff: float = 1.0, timeout: float = 10.0,
                 transport: Optional[Transport] = None) -> List[Dict[str, Any]]:
    """The agent's one call: send ``event`` to the channels of ``cfg`` (the spec's ``notify``)
    that want it (``on:`` of the channel, else of the section, else :data:`DEFAULT_ON`).
    Returns the outcomes (empty when nothing wants the event). Never raises."""
    try:
        every = list((cfg or {}).get("channels") or [])
        names = _channel_names(every)  # named over the whole list, so a channel's name is stable
        chans = [dict(c, name=n) for c, n in zip(every, names)
                 if isinstance(c, dict) and wants(cfg, str(event.get("event")), c)]
    except Exception:
        return []
    if not chans:
        return []
    return send_all(chans, event, secrets, state_dir, retries, backoff, timeout, transport, log)
