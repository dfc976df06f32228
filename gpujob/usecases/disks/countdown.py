"""How long a powered-off host keeps its disk: from the profile alone (no host is asked).

A host is powered off from when this laptop first found it so (``powered_off_at``: ``host off``,
``host state``, a command that found it off through its ``power.state``) until it is seen on again;
its profile's ``released_after`` (the preset's: AutoDL's 15 days) says when the platform releases it."""

from __future__ import annotations

import time
from typing import TypedDict

from gpujob.config.hosts import Host
from gpujob.usecases.disks.onlythere import Held

DAY = 86400.0


class Release(TypedDict, total=False):
    """A powered-off host's countdown (``host ls --json``'s ``release``); ``error``: a hand-edited
    ``released_after`` that is no duration (nothing else then)."""

    powered_off_at: float
    after_s: float
    released_at: float
    left_s: float
    left: str  # "12 days", "1 day 20 h", "20 h": days, and hours under 2 days
    only_there: list[Held]  # host ls: its jobs whose newest checkpoint is there alone (onlythere.py)
    error: str


def powered_off(host: Host) -> bool:
    """Whether the laptop last knew ``host`` powered off (found off after its last power-on)."""
    off, on = host.powered_off_at, host.powered_on_at or 0
    return isinstance(off, (int, float)) and off > 0 and isinstance(on, (int, float)) and on <= off


def release_of(host: Host, now: float | None = None) -> Release | None:
    """``host``'s countdown; None when it is not powered off or its platform never releases it."""
    if not powered_off(host) or host.powered_off_at is None:
        return None
    try:
        after = host.release_after_s
    except ValueError as e:
        return {"error": f"released_after of {host.name} in hosts.yaml: {e}; gpujob host set {host.name} "
                         "--released-after 15d sets it"}
    if after is None:
        return None
    at = host.powered_off_at + after
    left = at - (time.time() if now is None else now)
    return {"powered_off_at": host.powered_off_at, "after_s": after, "released_at": at, "left_s": round(left, 1),
            "left": left_text(left)}


def left_text(seconds: float) -> str:
    """``12 days``; under 2 days with hours (``1 day 20 h``, ``20 h``, ``under 1 h``); ``due`` when past."""
    if seconds <= 0:
        return "due"
    days, rest = divmod(int(seconds), int(DAY))
    if days >= 2:
        return f"{days} days"
    hours = rest // 3600
    if days:
        return f"1 day {hours} h" if hours else "1 day"
    return f"{hours} h" if hours else "under 1 h"
