"""Durations written as ``90s``, ``30m``, ``8h``, ``1d`` or plain seconds."""

from __future__ import annotations

import math
import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(value: object) -> float:
    """Seconds for ``value``; raises ValueError with the accepted forms."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 90s, 30m, 8h")
    if isinstance(value, (int, float)):
        seconds = float(value) if -1e300 < value < 1e300 else math.inf
    else:
        m = _RE.match(str(value))
        if not m:
            raise ValueError(f"{str(value)[:40]!r} is not a duration: write 90s, 30m, 8h or 1d")
        seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not math.isfinite(seconds):
        raise ValueError(f"{str(value)[:40]!r} is not a finite duration: write 90s, 30m, 8h or 1d")
    return seconds


def format_duration(seconds: float | None) -> str:
    """``1h02m`` style, for tables."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"
