"""A job record (one ``ls`` row from the API) flattened into what the jobs page shows.

Data only: the browser builds the table from these values with ``textContent``, so nothing a
host sent is ever parsed as HTML.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, TypedDict

from gpujob.dashboard.terminal import shown
from gpujob.jsontypes import JSONObject
from gpujob.transport.jobview import JobView

SPARK_POINTS = 40  # loss values kept per job for the table's sparkline


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else None


def loss_key(metrics: Mapping[str, object]) -> str | None:
    """The training loss among metric keys (as ``ls`` picks it): ``loss``, ``train_loss``, else the first ``*loss``."""
    names = [k for k in metrics if k not in ("step", "t", "epoch")]
    for k in ("loss", "train_loss", "train/loss"):
        if k in names:
            return k
    return next((k for k in names if "loss" in k.lower() and not k.lower().startswith(("eval", "val", "test"))), None)


def gpu_use(gpu: Mapping[str, object] | None) -> float | None:
    """Mean utilisation (%) over the job's GPUs now, from a ``status`` document's ``gpu``."""
    now = (gpu or {}).get("now")
    vals = [v for v in (_num(g.get("util")) for g in (now if isinstance(now, list) else []) if isinstance(g, dict))
            if v is not None]
    return round(sum(vals) / len(vals), 1) if vals else None


class Row(TypedDict):
    """One row of the jobs table, as the browser gets it."""

    key: str
    job_id: str
    name: str
    host: str
    state: str
    reason: str
    attempt: int | None
    step: float | None
    total: float | None
    eta_s: float | None
    steps_per_s: float | None
    loss_key: str | None
    loss: float | None
    spark: list[float]
    gpu: float | None
    cost: float | None
    currency: str
    elapsed_s: float | None
    submitted_at: float | None
    diagnosis: str
    last_line: str


def row(doc: JSONObject, history: list[float], gpu: float | None = None) -> Row:
    """One table row: the fields the page sorts and filters on, each a plain value or None.
    GPU use: the agent's newest sample in the ``ls`` record (``gpu_now``, a running job's), else
    ``gpu`` (from an open job page's ``status``: an older agent) while the job runs."""
    j = JobView(doc)
    if j.gpu_now is not None or j.state != "running":
        gpu = gpu_use(j.gpu_now)
    m = j.last_metrics or {}
    lk = loss_key(m)
    billing = j.billed
    step, total = _num(m.get("step")), _num(billing.max_steps)
    eta = _num(billing.eta_s)  # the agent's, from the rate of the recent metric lines
    started = _num(j.started_at)
    if eta is None and j.state == "running" and step and total and started:  # else: the mean rate so far
        rate = step / max(1e-6, (_num(j.now) or time.time()) - started)
        eta = max(0.0, (total - step) / rate)
    job_id = j.job_id if "job_id" in j else ""  # a null id is shown as such
    return {
        "key": f"{j.host or 'local'}/{job_id}",
        "job_id": str(job_id), "name": str(j.name or ""), "host": str(j.host or "local"),
        "state": str(j.state or ""), "reason": str(j.reason or ""),
        "attempt": j.attempt, "step": step, "total": total, "eta_s": eta,
        "steps_per_s": _num(billing.steps_per_s),
        "loss_key": lk, "loss": _num(m.get(lk)) if lk else None, "spark": history[-SPARK_POINTS:],
        "gpu": gpu, "cost": _num(billing.cost), "currency": str(billing.currency or ""),
        "elapsed_s": _num(billing.elapsed_s), "submitted_at": _num(j.submitted_at),
        "diagnosis": diagnosis(j),
        "last_line": " ".join(shown(str(j.last_line or "")).split())[:300],  # a bar's last redraw, not all
    }


MARKER = "==> gpujob: "  # the agent's own lines in a job's log: ``==> gpujob: TEXT [YYYY-mm-dd HH:MM:SS]``


def diagnosis(j: JobView) -> str:
    """Why the job failed, in a line: the diagnosis of its last attempt; else, for a job that failed or was
    lost with none (it never started: a setup that failed), its reason, said in full where the agent's last
    line in its log says more of it (``setup failed: conda env 'x' not found``) -- what ``status`` shows."""
    diag = j.diagnosis
    if isinstance(diag, dict) and (diag.get("summary") or diag.get("cause")):
        return str(diag.get("summary") or diag.get("cause"))
    if j.state not in ("failed", "lost"):
        return ""
    reason = str(j.reason or j.lost_reason or "")
    last = str(j.last_line or "")
    said = last[len(MARKER):].rsplit(" [", 1)[0] if last.startswith(MARKER) else ""
    return said if reason and said.startswith(reason) else reason
