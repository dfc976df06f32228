"""How long the laptop waits before trying again: doubling delays up to a cap, by the agent's own
formula (``remote/core/protocol.py``), so one formula serves both sides."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Callable

from gpujob.bundle import import_remote

# the wait before try ``n + 1`` after ``n`` failures (n >= 1): ``base``, then x ``factor`` each time,
# never above ``cap``; backoff(n, base, cap, factor=2.0)
backoff: Callable[..., float] = import_remote("core.protocol").backoff


def delays(base: float, cap: float, factor: float = 2.0) -> Iterator[float]:
    """``backoff(1)``, ``backoff(2)``, … without end."""
    return (backoff(n, base, cap, factor) for n in itertools.count(1))
