"""``gpujob cost``: what the jobs have cost, per job and per host (one remote command per host)."""

from __future__ import annotations

from typing import Any, Callable

from gpujob.agent import Agent


def job_cost(job: dict[str, Any]) -> dict[str, Any]:
    """One job's line: the agent's estimate (``billing`` in its status record) plus identity."""
    c = job.get("billing") or {}
    return {
        "job_id": job.get("job_id"), "host": job.get("host"), "state": job.get("state"),
        "elapsed_s": c.get("elapsed_s"), "cost": c.get("cost"), "currency": c.get("currency"),
        "price_per_hour": c.get("price_per_hour"), "projected_cost": c.get("projected_cost"), "eta_s": c.get("eta_s"),
    }


def summarize(hosts: list[str], agent_for: Callable[[str], Agent]) -> dict[str, Any]:
    """{jobs: [...], hosts: {name: {cost, currency, jobs, unpriced}}, total: {currency: sum}, errors}."""
    from gpujob.errors import GpujobError

    out: list[dict[str, Any]] = []
    per_host: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    for name in hosts:
        try:
            listed = agent_for(name).call("status")["jobs"]
        except GpujobError as e:
            errors[name] = str(e)
            continue
        h = per_host.setdefault(name, {"cost": 0.0, "currency": None, "jobs": 0, "unpriced": 0})
        for j in listed:
            line = job_cost({**j, "host": j.get("host") or name})
            out.append(line)
            h["jobs"] += 1
            if line["cost"] is None:
                h["unpriced"] += 1
            else:
                h["cost"] = round(h["cost"] + float(line["cost"]), 4)
                h["currency"] = h["currency"] or line["currency"]
    total: dict[str, float] = {}
    for h in per_host.values():
        if h["currency"]:
            total[h["currency"]] = round(total.get(h["currency"], 0.0) + h["cost"], 4)
    return {"jobs": out, "hosts": per_host, "total": total, "errors": errors}


def render(doc: dict[str, Any]) -> Any:
    """A rich table: one row per job, then one per host."""
    from rich.table import Table

    from gpujob.durations import format_duration

    t = Table(box=None, header_style="bold")
    for col in ("JOB", "HOST", "STATE", "ELAPSED", "COST", "PROJECTED"):
        t.add_column(col, no_wrap=True)
    for j in doc["jobs"]:
        cur = j.get("currency") or ""
        t.add_row(j["job_id"] or "?", j["host"] or "-", j["state"] or "?", format_duration(j.get("elapsed_s")),
                  f"{j['cost']:.2f} {cur}" if j.get("cost") is not None else "- (no price_per_hour)",
                  f"{j['projected_cost']:.2f} {cur}" if j.get("projected_cost") is not None else "-")
    for name, h in doc["hosts"].items():
        t.add_row(f"[bold]{name} total[/]", name, f"{h['jobs']} job(s)", "",
                  f"[bold]{h['cost']:.2f} {h['currency'] or ''}[/]" if h["currency"] else "-", "")
    return t
