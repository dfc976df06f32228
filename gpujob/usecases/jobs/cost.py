"""``gpujob cost``: what the jobs have cost, per job and per host (one remote command per host)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Callable, TypedDict

from gpujob.jsontypes import JSONObject
from gpujob.transport.jobview import JobView

if TYPE_CHECKING:
    from gpujob.config.ledger.store import LedgerRow
    from gpujob.transport.agent import Agent


class _Line(TypedDict):
    job_id: str | None  # (a damaged status document may lack it)
    host: str | None
    state: str | None
    elapsed_s: float | None
    cost: float | None
    currency: str | None
    price_per_hour: float | None
    projected_cost: float | None
    eta_s: float | None


class CostLine(_Line, total=False):
    """One job's line of ``gpujob cost``: the agent's estimate (its ``billing``), or the ledger's."""

    source: str  # "ledger": a job the hosts no longer list


class HostCost(TypedDict):
    """What one host's jobs cost: the sum of the priced ones, and how many were not priced."""

    cost: float
    currency: str | None
    jobs: int
    unpriced: int


class CostSummary(TypedDict):
    """``gpujob cost``'s document: every job's line, each host's sum, the total per currency, and why
    a host did not answer."""

    jobs: list[CostLine]
    hosts: dict[str, HostCost]
    total: dict[str, float]
    errors: dict[str, str]


def fill_host_price(job: JSONObject | None, price: float | None, currency: str | None) -> JSONObject | None:
    """A job record submitted without a price gets the host's current one (``host set --price``).

    The price is captured in spec.json at submit; a price set later reaches the job here, on the
    laptop where the profile lives, so status and cost show it even for a running job.
    """
    if not job or not price:
        return job
    view = JobView(job)
    spec, b, bill = view.spec, view.billing, view.billed
    if (spec or {}).get("price_per_hour") or bill.price_per_hour:
        return job
    if isinstance(spec, dict):
        spec.update(price_per_hour=price, currency=spec.get("currency") or currency)
    if isinstance(b, dict):
        b.update(price_per_hour=price, price_source="host", currency=bill.currency or currency)
        secs, eta = bill.elapsed_s, bill.eta_s
        if secs is not None:
            b["cost"] = round(float(price) * float(secs) / 3600.0, 4)
            if eta is not None:
                b["projected_cost"] = round(float(price) * (float(secs) + float(eta)) / 3600.0, 4)
    else:
        job["price_per_hour"] = price
    return job


def elapsed_s(job: JSONObject) -> float | None:
    """Seconds since the job's first attempt started, to its end (or the host's ``now``, else ours)."""
    view = JobView(job)
    start = view.started_at
    if not start:
        return None
    end = view.ended_at or view.now or time.time()
    return max(0.0, float(end) - float(start))


def accrued_cost(job: JSONObject) -> float | None:
    """``elapsed_s × price_per_hour`` to the cent (what ``status --json`` calls ``cost``); None without a price."""
    view = JobView(job)
    price = (view.spec or {}).get("price_per_hour") or view.price_per_hour
    secs = elapsed_s(job)
    if not price or secs is None:
        return None
    return round(price * secs / 3600, 2)


def job_cost(job: JSONObject) -> CostLine:
    """One job's line: the agent's estimate (``billing`` in its status record) plus identity."""
    view = JobView(job)
    c = view.billed
    return {
        "job_id": view.job_id, "host": view.host, "state": view.state,
        "elapsed_s": c.elapsed_s, "cost": c.cost, "currency": c.currency,
        "price_per_hour": c.price_per_hour, "projected_cost": c.projected_cost, "eta_s": c.eta_s,
    }


def from_ledger(listed: set[str | None], hosts: list[str] | None) -> list[CostLine]:
    """Lines of the jobs the hosts did not list (``rm``, ``gc``, a host given back or away) as the run
    ledger last saw them, ``source: ledger``; ``hosts`` None: of every host."""
    import sqlite3

    from gpujob.config.ledger import LedgerDamaged, ledger_path, open_ledger

    if not ledger_path().exists():
        return []
    try:
        with open_ledger() as lg:
            rows = lg.all()
    except (sqlite3.Error, LedgerDamaged) as e:
        print(f"gpujob: jobs the hosts forgot are not listed: {e}", file=sys.stderr)
        return []
    return [{"job_id": r["job_id"], "host": r.get("host"), "state": r.get("state"), "elapsed_s": _span(r),
             "cost": r.get("cost"), "currency": r.get("currency"), "price_per_hour": r.get("price_per_hour"),
             "projected_cost": None, "eta_s": None, "source": "ledger"}
            for r in rows if r["job_id"] not in listed and (hosts is None or r.get("host") in hosts)]


def _span(row: LedgerRow) -> float | None:
    start, end = row.get("started_at"), row.get("ended_at")
    if start and end:
        return max(0.0, float(end) - float(start))
    return None


def bill_instances(lines: list[CostLine], per_host: dict[str, HostCost]) -> None:
    """A pool's instance is billed for its life, made → released (docs/pools.md): its host's sum is that,
    not its jobs' (each job's line shows its own share at the pool's price), so nothing counts twice."""
    import sqlite3

    from gpujob.config.ledger import LedgerDamaged, ledger_path
    from gpujob.config.pools import instance_intervals, interval_cost

    if not ledger_path().exists():  # nothing submitted from here yet: no instance either
        return
    try:
        intervals = {iv["host"]: iv for iv in instance_intervals()}
    except (sqlite3.Error, LedgerDamaged) as e:
        print(f"gpujob: pool instances are not counted: {e}", file=sys.stderr)
        return
    for line in lines:
        iv = intervals.get(line.get("host") or "")
        price, secs = iv and iv["price_per_hour"], line["elapsed_s"]
        if iv and price and line["cost"] is None and secs is not None:
            line["price_per_hour"], line["currency"] = price, iv["currency"]
            line["cost"] = round(price * secs / 3600.0, 4)
    for name, iv in intervals.items():
        h = per_host.setdefault(name, {"cost": 0.0, "currency": None, "jobs": 0, "unpriced": 0})
        cost = interval_cost(iv)
        h["cost"], h["currency"] = cost or 0.0, iv["currency"] if cost is not None else None
        h["unpriced"] = h["jobs"] if cost is None else 0


def summarize(hosts: list[str], agent_for: Callable[[str], Agent], every_host: bool = True,
              whole: Callable[[Agent], Callable[[str], JSONObject]] | None = None) -> CostSummary:
    """{jobs: [...], hosts: {name: {cost, currency, jobs, unpriced}}, total: {currency: sum}, errors}.
    ``whole``: how a host gives an ended job's every point (the ledger's look at its end: watch.whole).

    Jobs the hosts no longer list are there too, from the run ledger (``every_host``: also of
    hosts not in ``hosts``): the cost history survives ``rm``, ``gc`` and a host given back.
    """
    from gpujob.errors import GpujobError
    from gpujob.usecases.jobs.ops import once_each, with_instance

    out: list[CostLine] = []
    per_host: dict[str, HostCost] = {}
    errors: dict[str, str] = {}
    seen: set[tuple[str, str]] = set()
    for name in hosts:
        try:
            agent = agent_for(name)
            listed = with_instance(agent.call("status", ["--all"]))  # every job: ls shows only the newest finished
        except GpujobError as e:
            errors[name] = str(e)
            continue
        for j in listed:
            j["host"] = JobView(j).host or name
        listed = once_each(listed, seen)  # another profile of the same instance listed them
        for j in listed:
            fill_host_price(j, agent.host.price_per_hour, agent.host.currency)
            out.append(job_cost({**j, "host": JobView(j).host or name}))
        from gpujob.usecases.experiments.record import observe

        observe(listed, name, whole(agent) if whole else None)
    out += from_ledger({j["job_id"] for j in out}, None if every_host else hosts)
    for line in out:
        name = line.get("host") or "?"
        h = per_host.setdefault(name, {"cost": 0.0, "currency": None, "jobs": 0, "unpriced": 0})
        h["jobs"] += 1
        if line["cost"] is None:
            h["unpriced"] += 1
        else:
            h["cost"] = round(h["cost"] + float(line["cost"]), 4)
            h["currency"] = h["currency"] or line["currency"]
    bill_instances(out, per_host)
    total: dict[str, float] = {}
    for h in per_host.values():
        if h["currency"]:
            total[h["currency"]] = round(total.get(h["currency"], 0.0) + h["cost"], 4)
    return {"jobs": out, "hosts": per_host, "total": total, "errors": errors}
