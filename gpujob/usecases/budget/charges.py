"""What the account is charged: intervals of a price per hour, summed over calendar periods.

A charge is one thing billed by the hour (``what``: a job id, or ``POOL/ID`` for a pool's instance) from its
``start`` to its ``end`` (None: still billed, counted to now). ``charges()`` is the one list every
limit is checked against; each source adds its own: the run ledger's jobs (from their start to their end, at the price
their host had when they were submitted) and the pools' instances (made → released).
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import sys
import time
from dataclasses import dataclass

from gpujob.bundle import import_remote
from gpujob.config.budget import DEFAULT_CURRENCY, PERIODS
from gpujob.jsontypes import JSONObject

# states whose job is billed no more; one the ledger last saw in another is counted to now
ENDED: tuple[str, ...] = import_remote("core.protocol").TERMINAL


@dataclass(frozen=True)
class Charge:
    what: str
    host: str | None
    start: float
    end: float | None  # None: still billed
    price_per_hour: float
    currency: str

    def cost(self, since: float, until: float) -> float:
        """What it cost between ``since`` and ``until`` (its interval clipped to them)."""
        a, b = max(self.start, since), min(self.end if self.end is not None else until, until)
        return max(0.0, b - a) * self.price_per_hour / 3600.0


def period_start(period: str, now: float) -> float:
    """The start of the calendar day, week (from Monday) or month that holds ``now``, in local time."""
    t = dt.datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        t -= dt.timedelta(days=t.weekday())
    elif period == "month":
        t = t.replace(day=1)
    return t.timestamp()


def period_name(period: str, now: float) -> str:
    """The period's label, e.g. ``2026-12-07``, ``2026-W50``, ``2026-12`` (a crossing is said once per label)."""
    t = dt.datetime.fromtimestamp(now)
    if period == "week":
        y, w, _ = t.isocalendar()
        return f"{y}-W{w:02d}"
    return t.strftime("%Y-%m-%d" if period == "day" else "%Y-%m")


def spent(charges: list[Charge], currency: str, period: str, now: float) -> float:
    since = period_start(period, now)
    return sum((c.cost(since, now) for c in charges if c.currency == currency), 0.0)


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def job_charges(now: float) -> list[Charge]:
    """The ledger's priced jobs since the month began (the longest period): from their start (else their
    submit, before any look saw them start) to their end (else the last look at an ended one, else now)."""
    from gpujob.config.ledger import LedgerDamaged, ledger_path, open_ledger

    if not ledger_path().exists():
        return []
    since = min(period_start(p, now) for p in PERIODS)
    try:
        with open_ledger() as lg:
            rows = lg.db.execute(
                "SELECT job_id, host, state, submitted_at, started_at, ended_at, updated_at, price_per_hour, currency "
                "FROM runs WHERE price_per_hour > 0 AND (ended_at IS NULL OR ended_at >= ?)", (since,)).fetchall()
    except (sqlite3.Error, OSError, LedgerDamaged) as e:
        print(f"gpujob: the spend leaves out the jobs: {e}", file=sys.stderr)
        return []
    out = []
    for job_id, host, state, submitted, started, ended, updated, price, cur in rows:
        start = _number(started) or _number(submitted)
        if start is None:
            continue
        end = _number(ended)
        if end is None and state in ENDED:
            end = _number(updated) or start
        out.append(Charge(str(job_id), host, start, end, float(price), cur or DEFAULT_CURRENCY))
    return out


def instance_charges(now: float) -> list[Charge]:
    """Pool instances (docs/pools.md), billed for their life: made → released (None: still there)."""
    from gpujob.config.ledger import ledger_path
    from gpujob.config.pools import instance_intervals

    if not ledger_path().exists():  # the instances are a table of the ledger's file: none made yet
        return []
    since = min(period_start(p, now) for p in PERIODS)
    try:
        ivs = instance_intervals()
    except (sqlite3.Error, OSError) as e:
        print(f"gpujob: the spend leaves out the pools' instances: {e}", file=sys.stderr)
        return []
    return [Charge(f"{iv['pool']}/{iv['id'] or iv['host']}", iv["host"], iv["made_at"], iv["released_at"],
                   float(iv["price_per_hour"]), iv["currency"] or DEFAULT_CURRENCY)
            for iv in ivs if iv["price_per_hour"] and (iv["released_at"] is None or iv["released_at"] >= since)]


def charges(now: float | None = None) -> list[Charge]:
    """Everything the account is billed for this month, from every source: a pool's instance is billed for
    its life, so the jobs it ran are not charged again."""
    now = time.time() if now is None else now
    inst = instance_charges(now)
    on_instances = {c.host for c in inst}
    return [c for c in job_charges(now) if c.host not in on_instances] + inst


def as_json(c: Charge, now: float) -> JSONObject:
    return {"what": c.what, "host": c.host, "start": c.start, "end": c.end, "price_per_hour": c.price_per_hour,
            "currency": c.currency, "cost": round(c.cost(c.start, now), 4)}
