"""How long the laptop waits before trying again: doubling delays up to a cap (one formula)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator


def backoff(n: int, base: float, cap: float, factor: float = 2.0) -> float:
    """The wait before try ``n + 1`` after ``n`` failures (n >= 1): ``base``, then × ``factor``
    each time, never above ``cap``."""
    return min(cap, base * factor ** min(max(n, 1) - 1, 64))  # the exponent bounded: no overflow


def delays(base: float, cap: float, factor: float = 2.0) -> Iterator[float]:
    """``backoff(1)``, ``backoff(2)``, … without end."""
    return (backoff(n, base, cap, factor) for n in itertools.count(1))
