"""``gpujob status JOB`` in depth: one agent call (``watch``) gives state, curves and GPU use.

``status_doc`` flattens the agent's answer into what ``status --json`` prints (the job's
record plus derived figures). Data only: gpujob.ui.live redraws it in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpujob.jsontypes import JSONObject
from gpujob.transport.agent import Agent
from gpujob.transport.jobview import JobView, WatchView
from gpujob.usecases.jobs.cost import accrued_cost, elapsed_s, fill_host_price

EVAL_PREFIXES = ("eval", "val", "test")
WHOLE_FALLBACK = 5000  # points per metric of a curve too large for one reply


def loss_key(keys: Iterable[str]) -> str | None:
    """The training loss among metric keys: ``loss``, ``train_loss``, else the first ``*loss``."""
    names = list(keys)
    for k in ("loss", "train_loss", "train/loss"):
        if k in names:
            return k
    return next((k for k in names if "loss" in k.lower() and not k.lower().startswith(EVAL_PREFIXES)
                 and not k.lower().endswith(("/val", "/eval", "/test", "_val"))), None)


def max_steps_of(doc: JSONObject) -> int | None:
    """Total steps: the metric key ``max_steps``, else the log's progress bar total, else env
    GPUJOB_MAX_STEPS / MAX_STEPS of the job."""
    w = WatchView(doc)
    latest = w.latest or {}
    if isinstance(latest.get("max_steps"), (int, float)):
        return int(latest["max_steps"])
    total = w.bar.total
    if isinstance(total, (int, float)) and total > 0:
        return int(total)
    env = (w.record.spec or {}).get("env") or {}
    for k in ("GPUJOB_MAX_STEPS", "MAX_STEPS"):
        try:
            return int(env[k])
        except (KeyError, TypeError, ValueError):
            continue
    return None


def status_doc(doc: JSONObject) -> JSONObject:
    """The job record with the figures status shows: series, GPU, throughput, ETA, cost."""
    w = WatchView(doc)
    job = dict(w.job or {})
    record = JobView(job)
    latest = {k: v for k, v in (w.latest or {}).items() if k != "t"}
    series = w.series or {}
    rate = w.rate
    step = latest.get("step")
    bar = w.bar.step
    if isinstance(bar, (int, float)) and (not isinstance(step, (int, float)) or bar > step):
        step = latest["step"] = bar  # the bar moves between two metric lines
    total = max_steps_of(doc)
    eta = None
    if rate and total and isinstance(step, (int, float)) and record.state == "running":
        eta = max(0.0, (total - step) / rate)
    lk = loss_key(series) or loss_key(latest)  # the log's first lines are read at status time, before any series
    job.update(
        latest_metrics=latest,
        series=series,
        loss_key=lk,
        eval_metrics={k: v for k, v in latest.items() if k.startswith(EVAL_PREFIXES)},
        gpu=w.gpu,
        steps_per_s=rate,
        max_steps=total,
        eta_s=eta,
        metrics_source=w.source if "source" in w else record.metrics_source,
        elapsed_s=elapsed_s(job),
        cost=accrued_cost(job),
    )
    return job


def fetch(agent: Agent, job: str, points: int = 60) -> JSONObject:
    """One remote command: the agent's ``watch`` verb."""
    doc = agent.call("watch", ["--job", job, "--points", str(points)])
    fill_host_price(doc.get("job"), agent.host.price_per_hour, agent.host.currency)  # a price set after submit
    return status_doc(doc)


def whole(agent: Agent) -> Callable[[str], JSONObject]:
    """How the ledger reads an ended job's final metrics and every point it logged (record.observe's
    ``whole``): one ``watch`` of the whole curve, or ``WHOLE_FALLBACK`` points spread over one too
    large for a reply."""
    from gpujob.transport.replies import UnreadableReply

    def read(job_id: str) -> JSONObject:
        try:
            return fetch(agent, job_id, points=0)
        except UnreadableReply:
            return fetch(agent, job_id, points=WHOLE_FALLBACK)

    return read
