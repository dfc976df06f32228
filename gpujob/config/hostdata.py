"""Host answers a profile keeps (the preflight's ``bench``): one gate for all of them.

A value kept in ``hosts.yaml`` is read by commands that ask no host (``host ls``, every submit's
placement), so it passes the checks of a reply as it arrives (``transport/replies.py``: shape, size)
when it is stored, and again when it is read back: a bad one already in a profile (an older gpujob
stored it, or a hand edit) is dropped from the profile with one warning naming the host and how to
measure again, never fatal to a command. Text in it is drawn through ``ui/neutral.py`` like a reply's.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from gpujob.jsontypes import JSONObject
from gpujob.transport import replies

KEPT = {"bench": "bench"}  # profile field → the agent verb whose answer it holds


def admit(field: str, host: str, value: JSONObject) -> JSONObject:
    """``value`` (a fresh answer of ``host``) as it may be kept in its profile's ``field``;
    ``UnreadableReply`` when the host answered what no agent of ours writes."""
    wrong = replies.stored_ok(KEPT[field], value)
    if wrong:
        raise replies.unreadable(host, f"{wrong} in its {KEPT[field]!r} reply (not kept in its profile)")
    return value


def bad_kept(profile: Mapping[str, object]) -> dict[str, str]:
    """The kept answers of a profile (as read from hosts.yaml) that fail the gate: field → what is wrong."""
    out = {}
    for field, verb in KEPT.items():
        if profile.get(field) is not None:
            wrong = replies.stored_ok(verb, profile[field])
            if wrong:
                out[field] = wrong
    return out


def warn_dropped(path: object, host: str, dropped: dict[str, str]) -> None:
    for field, wrong in dropped.items():
        print(f"gpujob: warning: host {host}: the {field} kept in {path} is not what gpujob writes ({wrong}): "
              f"ignored and removed; gpujob doctor {host} --bench measures the host again", file=sys.stderr)
