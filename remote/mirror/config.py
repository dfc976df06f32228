"""``checkpoint.mirror`` in the job file: its checks and the form the agent receives.

    checkpoint:
      mirror: s3://bucket/ckpt                 # one target, or a list, or a mapping:
      mirror:
        to: [s3://bucket/ckpt, /root/autodl-fs/ckpt]
        endpoint: https://oss-cn-beijing.aliyuncs.com   # s3:// targets: the store's endpoint
        provider: Alibaba                        # rclone's s3 provider (default: Other/AWS)
        region: cn-beijing
        bwlimit: 40M                             # rclone --bwlimit
        keep: 5                                  # on the mirror (default: checkpoint.keep)
        wait: 30m                                # after: shutdown waits this long for the mirror
        alert_after: 10m                         # failing this long: a notification

Credentials never appear here: they are the job's ``secrets:`` (AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY for s3://, RCLONE_CONFIG_<REMOTE>_* for ``remote:path``).
"""

import re
from typing import Any, Dict, List, Tuple

from remote.core.protocol import parse_duration
from remote.core.sections import MIRROR_ALERT, MIRROR_WAIT
from remote.core.spec import CHECKPOINT_KEEP, MAX_KEEP

KEYS = ["to", "endpoint", "provider", "region", "bwlimit", "keep", "wait", "alert_after"]
_REMOTE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\- ]*:")
_BWLIMIT = re.compile(r"^\d+(\.\d+)?[BKMGTP]?(:\d+(\.\d+)?[BKMGTP]?)?$", re.I)


def target_error(t: Any) -> str:
    """Why ``t`` is no mirror target ('' when it is one)."""
    if not isinstance(t, str) or not t.strip():
        return "expected an absolute path on the instance, s3://bucket/prefix or remote:path, got {!r}".format(t)
    if "\0" in t or "\n" in t:
        return "holds a NUL or newline character"
    if t.startswith("/"):
        return "" if ".." not in t.split("/") else "an absolute path without '..'"
    if t.startswith("s3://"):
        return "" if t[5:].strip("/") else "s3:// needs a bucket: s3://bucket/prefix"
    if "://" in t:
        return "{!r}: only s3:// is spelled as a URL; other stores are remote:path (an rclone remote)".format(t)
    if _REMOTE.match(t):
        return ""
    return "{!r}: a relative path would land inside the instance's job folder; give an absolute path " \
           "(/root/autodl-fs/ckpt), s3://bucket/prefix or remote:path".format(t)


def validate(raw: Any, keep: int = CHECKPOINT_KEEP) -> Tuple[Dict[str, Any], List[str]]:
    """(the normalised section, its problems): ``{targets, bwlimit, keep, wait, alert_after, ...}``."""
    if raw is None or raw == [] or raw == {}:
        return {}, []
    if isinstance(raw, (str, list)):
        raw = {"to": raw}
    if not isinstance(raw, dict):
        return {}, ["expected a target (s3://bucket/prefix, remote:path, /abs/path), a list of them, "
                    "or {to: ..., bwlimit: ..., keep: ...}"]
    errs = ["unknown key {!r} (known: {})".format(k, ", ".join(KEYS)) for k in raw if k not in KEYS]
    to = raw.get("to")
    targets = [to] if isinstance(to, str) else to if isinstance(to, list) else None
    if not targets:
        errs.append("to: give at least one target (s3://bucket/prefix, remote:path or /abs/path)")
        targets = []
    for i, t in enumerate(targets):
        why = target_error(t)
        if why:
            errs.append("to[{}]: {}".format(i, why) if len(targets) > 1 else "to: " + why)
    if len(set(map(str, targets))) != len(targets):
        errs.append("to: a target appears twice")
    out = {"targets": [str(t).rstrip("/") if str(t) != "/" else "/" for t in targets]}  # type: Dict[str, Any]
    for k in ("endpoint", "provider", "region"):
        v = raw.get(k)
        if v is not None:
            if not isinstance(v, str) or not v or "\n" in v:
                errs.append("{}: expected a string".format(k))
            else:
                out[k] = v
    bw = raw.get("bwlimit")
    if bw is not None:
        if isinstance(bw, bool) or not _BWLIMIT.match(str(bw)):
            errs.append("bwlimit: expected a rate such as 40M (bytes/s, rclone's --bwlimit), got {!r}".format(bw))
        else:
            out["bwlimit"] = str(bw)
    k = raw.get("keep", keep)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_KEEP:
        errs.append("keep: expected a number of checkpoints from 1 to {}, got {!r}".format(MAX_KEEP, k))
    else:
        out["keep"] = k
    for key, default in (("wait", MIRROR_WAIT), ("alert_after", MIRROR_ALERT)):
        try:
            out[key] = parse_duration(raw[key]) if key in raw else default
            if not 0 <= out[key] <= 7 * 86400:
                errs.append("{}: expected a duration up to 7d".format(key))
        except ValueError as e:
            errs.append("{}: {}".format(key, e))
    return out, errs
