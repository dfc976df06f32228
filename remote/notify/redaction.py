"""Secrets in a notify config: ``${NAME}`` references, literal values moved to the secrets file,
and :func:`redact`, which every error text, outcome, log line and message goes through."""

import re
import urllib.parse
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, cast

from .base import ChannelConfig, kind_of

REDACTED = "***"
MIN_SECRET_LEN = 4  # shorter values are not searched for in text (they would match everywhere)

_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def secret_names(cfg: Optional[Mapping[str, object]]) -> List[str]:
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


def resolve_channel(ch: Mapping[str, object], secrets: Optional[Dict[str, str]]) -> Tuple[ChannelConfig, List[str], List[str]]:
    """(channel with ``${NAME}`` substituted, its sensitive values, names of missing secrets)."""
    secrets = secrets or {}
    missing = []  # type: List[str]
    resolved = _subst(dict(ch), secrets, missing)
    sensitive = []  # type: List[str]
    for name in secret_names({"channels": [ch]}):
        if name in secrets:
            sensitive.append(str(secrets[name]))
    kind = kind_of(ch)
    for key in (kind.secret_keys if kind else ()):
        v = resolved.get(key)
        if isinstance(v, dict):
            sensitive.extend(str(x) for x in v.values() if x)
        elif v:
            sensitive.append(str(v))
    return resolved, sensitive, missing


def externalize_secrets(cfg: Optional[Mapping[str, object]], prefix: str = "GPUJOB_NOTIFY") -> Tuple[Dict[str, object], Dict[str, str]]:
    """Move literal values at secret keys out of a notify config.

    Returns (config with each literal replaced by ``${PREFIX_<i>_<KEY>}``, {name: value}), so
    the config can go to spec.json and the values to the 0600 secrets file.
    """
    if not cfg:
        return {}, {}
    out = dict(cfg)
    found = {}  # type: Dict[str, str]
    chans = []
    for i, ch in enumerate(cast(Iterable[object], cfg.get("channels") or [])):  # a list once validated
        if not isinstance(ch, dict):
            chans.append(ch)
            continue
        ch = dict(ch)
        kind = kind_of(ch)
        for key in (kind.secret_keys if kind else ()):
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


def redact_obj(obj: Any, secrets: Iterable[str]) -> Any:
    if isinstance(obj, str):
        return redact(obj, secrets)
    if isinstance(obj, dict):
        return {k: redact_obj(v, secrets) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v, secrets) for v in obj]
    return obj


def all_sensitive(channels: Iterable[Any], secrets: Optional[Dict[str, str]]) -> List[str]:
    """Every value to hide: the secrets' values and each channel's secret-bearing values."""
    vals = [str(v) for v in (secrets or {}).values() if v]
    for ch in channels:
        if isinstance(ch, dict):
            vals.extend(resolve_channel(ch, secrets)[1])
    return vals
