"""The compare page's data: runs with their curves and parameters, and which parameters differ.

A source turns the keys the page was given into runs ``{key, job_id, host, state, params,
series}`` (``series``: metric → ``[[step, value, t], ...]``). Today the one source is the jobs
the hub sees; the run ledger (issue "Experiments") plugs in as another entry of ``SOURCES``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from gpujob.errors import GpujobError

MAX_RUNS = 12


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """``{"env": {"LR": 3}}`` → ``{"env.LR": 3}``; lists stay values (shown as JSON)."""
    if not isinstance(d, dict):
        return {prefix: d} if prefix else {}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def from_jobs(hub: Any, keys: list[str], wait: float = 30.0) -> list[dict[str, Any]]:
    """Runs from the jobs' ``status`` (the hub's watchers: a job already open in a tab costs no call)."""
    watchers = []
    for key in keys:
        host, _, job_id = key.partition("/")
        if not job_id:
            raise GpujobError(f"compare: {key!r} is not HOST/JOB", "pick the jobs on the jobs page")
        watchers.append(hub.watch(host, job_id))
    deadline = time.monotonic() + wait
    while any(w.doc is None and w.error is None for w in watchers) and time.monotonic() < deadline:
        hub.wait_change(hub.version, 0.5)
    runs = []
    for w in watchers:
        doc = w.doc or {}
        params = {"host": w.host, **flatten(doc.get("spec") or {})}
        params.pop("job_id", None)  # the column's title names it
        runs.append({"key": f"{w.host}/{w.job_id}", "job_id": w.job_id, "host": w.host, "state": doc.get("state"),
                     "error": w.error, "params": params, "series": doc.get("series") or {}})
    return runs


SOURCES: dict[str, Callable[..., list[dict[str, Any]]]] = {"jobs": from_jobs}


def differing(runs: list[dict[str, Any]]) -> list[str]:
    """The parameter names whose values are not the same in every run (absent counts as a value)."""
    names = sorted({k for r in runs for k in r["params"]})
    return [k for k in names if len({repr(r["params"].get(k)) for r in runs}) > 1]


def compare(hub: Any, keys: list[str], source: str = "jobs") -> dict[str, Any]:
    if not keys:
        raise GpujobError("compare: no runs selected", "tick two or more jobs on the jobs page, then Compare")
    if len(keys) > MAX_RUNS:
        raise GpujobError(f"compare: {len(keys)} runs selected, at most {MAX_RUNS} overlay readably",
                          "select fewer jobs")
    if source not in SOURCES:
        raise GpujobError(f"compare: unknown source {source!r}", f"one of {', '.join(SOURCES)}")
    runs = SOURCES[source](hub, keys)
    diff = differing(runs)
    return {"runs": [{**r, "params": {k: r["params"].get(k) for k in diff}} for r in runs], "differing": diff}
