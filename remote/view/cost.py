"""What a job has cost so far, and what it will cost at its present pace.

Elapsed time runs from the first attempt's start to the end (or now): restarts and backoff
waits are billed too, since the instance is rented either way. The projection uses the
step rate of the current attempt (a resumed run restarts its step count from the
checkpoint, so older attempts would mislead) and ``max_steps`` from the job's metrics or
its ``GPUJOB_MAX_STEPS`` environment variable.
"""

import json
import os
from pathlib import Path
from typing import Dict, List, Optional

from remote.core.jobrecord import JobRecord, RecordLike
from remote.core.layout import tail_lines
from remote.core.spec import CURRENCY, JobSpec, SpecLike
from remote.metrics.metricrecord import MetricRecord, Progress
from remote.metrics.totals import run_hints, total_from_epochs


def _metrics_window(path: Path, since: float) -> List[MetricRecord]:
    """Metrics records (from the last 64 KiB) written at or after ``since`` that carry a step."""
    out = []
    for line in tail_lines(path, 100000, 65536):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("step"), (int, float)) and float(rec.get("t", since)) >= since:
            out.append(rec)
    return out


def max_steps(spec: SpecLike, records: List[MetricRecord]) -> Optional[int]:
    for rec in reversed(records):
        if isinstance(rec.get("max_steps"), (int, float)) and rec["max_steps"] > 0:
            return int(rec["max_steps"])
    return run_hints(spec).get("max_steps")


def estimate(status: RecordLike, spec: SpecLike, metrics: Path, now: float,
             progress: Optional[Progress] = None, known_total: Optional[int] = None) -> Dict[str, object]:
    """{elapsed_s, cost, price_per_hour, currency, max_steps, step, steps_per_s, eta_s, projected_cost}.

    Step progress and the projection only while the job runs (a listing of many ended jobs
    reads no metrics). ``metrics`` is the job's active metrics file; ``progress`` what the log's
    progress bar said (its total and rate stand in where the records carry none); ``known_total``
    the total a source stated before (the log's ``step N/200`` while the events are the metrics).
    """
    spec = JobSpec.of(spec)
    status = JobRecord.of(status)
    start = status.started_at
    end = status.ended_at or now
    elapsed = max(0.0, float(end) - float(start)) if start else 0.0
    price = spec.price_per_hour
    doc: Dict[str, object] = {"elapsed_s": round(elapsed, 1), "price_per_hour": price,
                           "currency": spec.currency or CURRENCY}
    doc["cost"] = round(float(price) * elapsed / 3600.0, 4) if price else None
    attempts = status.attempts
    since = float(attempts[-1].get("started_at") or 0) if attempts else 0.0
    live = status.state in ("running", "restarting")
    recs = _metrics_window(metrics, since) if live and os.path.exists(str(metrics)) else []
    prog = progress if live and progress and float(progress.get("t") or 0) >= since else {}
    total = max_steps(spec, recs) or prog.get("total") or known_total \
        or total_from_epochs(recs, run_hints(spec).get("epochs"))
    doc["max_steps"] = total
    step = float(recs[-1]["step"]) if recs else prog.get("step")
    if step is None or not total:
        return doc
    doc["step"] = int(step)
    doc["progress"] = round(min(1.0, step / total), 4)
    rate = None
    if recs:
        dt = float(recs[-1].get("t", 0)) - float(recs[0].get("t", 0))
        dstep = step - float(recs[0]["step"])
        rate = dstep / dt if dt > 0 and dstep > 0 else None
    rate = prog.get("rate") or rate  # the bar's own rate is measured per step, not per metric line
    if rate:
        doc["steps_per_s"] = round(rate, 4)
        eta = max(0.0, (total - step) / rate)
        doc["eta_s"] = round(eta, 1)
        if price:
            doc["projected_cost"] = round(float(price) * (elapsed + eta) / 3600.0, 4)
    return doc
