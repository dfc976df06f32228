"""The compare page's data: runs with their curves and parameters, and which parameters differ.

A source turns the keys the page was given into runs ``{key, job_id, host, state, params,
series}`` (``series``: metric → ``[[step, value, wall time], ...]``): ``jobs``, the jobs the hub sees
(live, from their ``status``), or ``ledger``, the run ledger through ``Client.compare`` (runs no
host holds any more too, with the curves the ledger kept).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Callable, TypedDict

from gpujob.errors import GpujobError
from gpujob.jsontypes import JSON, JSONObject
from gpujob.transport.jobview import JobView

MAX_RUNS = 12


class _Run(TypedDict):
    key: str  # HOST/JOB
    job_id: JSON
    host: JSON
    state: JSON
    error: str | None  # why the job's status could not be had
    params: JSONObject  # flattened: ``env.LR``
    series: JSON  # metric → [[step, value, wall time], ...]


class Run(_Run, total=False):
    """One run of the compare page, as a source gives it."""

    sweep: JSON  # the ledger's: the study and trial the run belongs to
    trial: JSON


def flatten(d: Any, prefix: str = "") -> JSONObject:
    """``{"env": {"LR": 3}}`` → ``{"env.LR": 3}``; lists stay values (shown as JSON)."""
    if not isinstance(d, dict):
        return {prefix: d} if prefix else {}
    out: JSONObject = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def from_jobs(hub: Any, keys: list[str], wait: float = 30.0) -> list[Run]:
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
    runs: list[Run] = []
    for w in watchers:
        doc = JobView(w.doc or {})
        params: JSONObject = {"host": w.host, **flatten(doc.spec or {})}
        params.pop("job_id", None)  # the column's title names it
        runs.append({"key": f"{w.host}/{w.job_id}", "job_id": w.job_id, "host": w.host, "state": doc.state,
                     "error": w.error, "params": params, "series": doc.series or {}})
    return runs


def from_ledger(hub: Any, keys: list[str], make_client: Callable[[], Any] | None = None) -> list[Run]:
    """Runs from the ledger (``Client.compare``: it asks a host only for a run it has no curve of yet).
    A key is a run's id (``HOST/ID`` as the jobs page writes it works too)."""
    if make_client is None:
        from gpujob.api import Client

        make_client = Client
    refs = [k.rpartition("/")[2] for k in keys]
    if len(refs) < 2:
        raise GpujobError("compare: the ledger compares two runs or more", "tick another run on the runs page")
    with make_client() as c:
        doc = c.compare(*refs).to_json()
    same = doc.get("same_params") or {}
    # what differs in code and environment counts as a parameter here ("host", "code.code_hash", ...)
    varying = {**(doc.get("params") or {}), **{f"code.{k}": v for k, v in (doc.get("code") or {}).items()},
               **{k if k == "host" else f"env.{k}": v for k, v in (doc.get("env") or {}).items()}}
    runs: list[Run] = []
    for i, run in enumerate(doc.get("runs") or []):
        params = {**same, **{k: vals[i] for k, vals in varying.items()}}
        params.setdefault("host", run.get("host"))
        runs.append({"key": f"{run.get('host')}/{run.get('job_id')}", "job_id": run.get("job_id"),
                     "host": run.get("host"), "state": run.get("state"), "error": None, "params": params,
                     "sweep": run.get("sweep"), "trial": run.get("trial"),
                     "series": {k: per[i] for k, per in (doc.get("series") or {}).items() if per[i]}})
    return runs


SOURCES: dict[str, Callable[..., list[Run]]] = {"jobs": from_jobs, "ledger": from_ledger}


def differing(runs: list[Run]) -> list[str]:
    """The parameter names whose values are not the same in every run (absent counts as a value)."""
    names = sorted({k for r in runs for k in r["params"]})
    return [k for k in names if len({repr(r["params"].get(k)) for r in runs}) > 1]


def compare(hub: Any, keys: list[str], source: str = "jobs") -> Mapping[str, object]:
    if not keys:
        raise GpujobError("compare: no runs selected", "tick two or more jobs on the jobs page, then Compare")
    if len(keys) > MAX_RUNS:
        raise GpujobError(f"compare: {len(keys)} runs selected, at most {MAX_RUNS} overlay readably",
                          "select fewer jobs")
    if source not in SOURCES:
        raise GpujobError(f"compare: unknown source {source!r}", f"one of {', '.join(SOURCES)}")
    runs = SOURCES[source](hub, keys)
    diff = differing(runs)
    sweeps = {r.get("sweep") for r in runs}
    # params: the ones that differ (the page's default); all_params: every one (its "show all" toggle);
    # sweep: the study the runs all belong to, whose history and importances the page draws
    return {"runs": [{**r, "params": {k: r["params"].get(k) for k in diff}, "all_params": r["params"]} for r in runs],
            "differing": diff, "sweep": sweeps.pop() if len(sweeps) == 1 else None}
