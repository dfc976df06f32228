"""A submit against the account's limits (``gpujob budget``), decided before anything is sent.

A job whose own bound (``autostop.budget``, or ``max_runtime`` x the host's price) would pass a
limit with what was spent already is refused, with the figures; so is any job once a limit is
reached. A job with no bound goes, capped by the agent: its ``autostop.budget`` becomes what is left
of the tightest period, so it stops (after its next checkpoint) with the laptop shut.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time

from gpujob.bundle import import_remote
from gpujob.config.budget import PERIODS, load_budget
from gpujob.config.hosts import Host
from gpujob.config.spec import JobSpec
from gpujob.errors import GpujobError
from gpujob.usecases.budget.charges import charges, period_start, spent


class OverBudget(GpujobError):
    """A submit would pass one of the account's limits: nothing was sent."""


def _day(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(t))


def job_bound(spec: JobSpec, price: float) -> tuple[float, str] | None:
    """(the most the job may cost, what says so) from its ``autostop:``; None: unbounded."""
    a = spec.autostop or {}
    bounds = []
    if isinstance(a.get("budget"), (int, float)) and not isinstance(a.get("budget"), bool):
        bounds.append((float(a["budget"]), f"its autostop.budget {a['budget']:g}"))
    if a.get("max_runtime") is not None:
        hours = import_remote("core.protocol").parse_duration(a["max_runtime"]) / 3600.0
        bounds.append((hours * price, f"autostop.max_runtime {a['max_runtime']} x {price:.2f}/h"))
    return min(bounds) if bounds else None


def price_of(host: Host) -> tuple[float | None, str]:
    """What ``host`` costs an hour: a pool's instance carries no price of its own, its pool's is the one billed."""
    if host.pool:
        from gpujob.config.pools import get_pool
        from gpujob.errors import HostError

        try:
            pool = get_pool(host.pool)
        except HostError:  # the pool was removed meanwhile: nothing to bill the job against
            return None, host.currency
        return pool.price_per_hour, pool.currency
    return host.price_per_hour, host.currency


def admit(spec: JobSpec, host: Host, now: float | None = None) -> JobSpec:
    """``spec`` as it may go to ``host`` (capped when unbounded), or ``OverBudget`` with the figures."""
    price, cur = price_of(host)
    budget = load_budget()
    limits = {p: v for p in PERIODS if (v := budget.limit(cur, p)) is not None}
    if not price or not limits:
        return spec  # nothing to count against a limit
    now = time.time() if now is None else now
    have = charges(now)
    bound = job_bound(spec, price)
    left: dict[str, float] = {}
    for p, limit in limits.items():
        used = spent(have, cur, p, now)
        left[p] = limit - used
        figures = (f"{used:.2f} {cur} spent this {p} (since {_day(period_start(p, now))}) of its limit of "
                   f"{limit:.2f} {cur}")
        if used >= limit:
            raise OverBudget(f"the {p} limit is reached: {figures}; nothing was sent to {host.name}",
                             f"raise it (gpujob budget set --{p} AMOUNT{_flag(cur)}), or wait for the next {p}")
        if bound is not None and used + bound[0] > limit:
            raise OverBudget(
                f"this job would pass the {p} limit: {figures}, and it may cost {bound[0]:.2f} {cur} "
                f"({bound[1]} on {host.name}); nothing was sent",
                f"raise the limit (gpujob budget set --{p} {math.ceil(used + bound[0])}{_flag(cur)}), or lower the "
                f"job's autostop.budget / max_runtime to at most {limit - used:.2f} {cur}")
    if bound is not None:
        return spec
    cap = math.floor(min(left.values()) * 100) / 100  # to the cent, never above what is left
    tight = min(left, key=lambda p: left[p])
    print(f"gpujob: {spec.name} has no autostop bound: its agent stops it at {cap:.2f} {cur}, what is left of the "
          f"{tight} limit (after its next checkpoint)", file=sys.stderr)
    return dataclasses.replace(spec, autostop={**spec.autostop, "budget": cap})


def _flag(currency: str) -> str:
    from gpujob.config.budget import DEFAULT_CURRENCY

    return "" if currency == DEFAULT_CURRENCY else f" --currency {currency}"
