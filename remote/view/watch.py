"""``watch``: everything ``gpujob status JOB`` shows, in one document per refresh: the job's
detail (remote/view/status.py), its metric history (down-sampled), GPU samples summarised, the
progress and derived rates."""

import json
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, TypedDict, TypeVar

from remote.core.jobrecord import JobRecord
from remote.core.jsontypes import JSONObject, is_object
from remote.core.layout import JobDir, Root, read_tail
from remote.host.gpus import GpuSample
from remote.jobs import store as jobs
from remote.metrics.metricrecord import MetricRecord, Progress
from remote.view import status

Row = TypeVar("Row")
MAX_READ = 32 << 20  # at most this much of a .jsonl file's end is read (plot: every point)
LIVE_READ = 4 << 20  # status: the newest ~50k metric lines


class GpuSummary(TypedDict):
    """``gpu_summary``: the newest sample's GPUs, per-GPU averages and how many samples."""
    now: List[Dict[str, Optional[float]]]
    t: Optional[float]
    avg: List[Dict[str, Optional[float]]]
    samples: int


def _read_jsonl(path: Path, max_bytes: int = MAX_READ) -> List[Row]:  # the caller names the lines' kind
    data, size = read_tail(path, max_bytes)
    lines = data.split(b"\n")
    if size > max_bytes:
        lines = lines[1:]  # the first one is cut
    out = []
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            continue
        if is_object(rec):
            out.append(rec)
    return out


def downsample(rows: List[Any], points: int) -> List[Any]:
    """At most ``points`` rows spread evenly, always keeping the first and the last."""
    if points <= 0 or len(rows) <= points:
        return rows
    if points == 1:
        return rows[-1:]
    step = (len(rows) - 1) / float(points - 1)
    return [rows[int(round(i * step))] for i in range(points)]


def gpu_summary(path: Path) -> Optional[GpuSummary]:
    """The newest sample and per-GPU time-weighted averages over ``gpu.jsonl``; None when there is none.

    A compacted line (``w``: the seconds it averages) weighs ``w``; a raw sample weighs the
    sampling interval (the median gap between raw samples).
    """
    lines: List[GpuSample] = _read_jsonl(path, 8 << 20)  # what the Sampler wrote (remote/host/gpus.py)
    samples = [s for s in lines if isinstance(s.get("gpus"), list)]
    if not samples:
        return None
    raw_t = sorted(float(s["t"]) for s in samples if not s.get("w") and isinstance(s.get("t"), (int, float)))
    gaps = sorted(b - a for a, b in zip(raw_t, raw_t[1:]) if b > a)
    interval = gaps[len(gaps) // 2] if gaps else 5.0
    keys = ("util", "mem_used")
    sums = {}  # type: Dict[Any, Dict[str, List[float]]]  # index -> key -> [weighted sum, weight]
    for s in samples:
        weight = float(s.get("w") or interval)
        for g in s["gpus"]:
            acc = sums.setdefault(g.get("index"), {k: [0.0, 0.0] for k in keys})
            for k in keys:
                v = g.get(k)
                if isinstance(v, (int, float)):
                    acc[k][0] += float(v) * weight
                    acc[k][1] += weight
    avg = []
    for i, a in sorted(sums.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        row = {"index": i}  # type: Dict[str, Optional[float]]
        for k in keys:
            row[k] = round(a[k][0] / a[k][1], 1) if a[k][1] else None
        avg.append(row)
    return {"now": samples[-1]["gpus"], "t": samples[-1].get("t"), "avg": avg, "samples": len(samples)}


def watch(root: Root, ref: str, points: int = 60) -> Mapping[str, object]:
    """The job's detail, its metric series and GPU summary, in one document."""
    job_id = jobs.resolve(root, ref)
    job = root.job(job_id)
    detail = status.describe(root, job_id, detail=True)
    rec = JobRecord(detail)  # the record's fields of it, typed
    from remote.metrics import metricsrc, totals

    since = status.attempt_start(rec)
    # a look: the source with this attempt's records (a restart); every point (plot, an export): the first with any
    source, path = metricsrc.active(job, since if points > 0 else 0.0)
    rows: List[MetricRecord] = _read_jsonl(path, MAX_READ if points <= 0 else LIVE_READ)  # a refresh stays cheap
    keys = []  # type: List[str]
    for r in rows:
        for k, v in r.items():
            if k not in ("t", "step", "epoch", "max_steps") and isinstance(v, (int, float)) and not isinstance(v, bool) \
                    and k not in keys:
                keys.append(k)
    series = {}  # type: Dict[str, List[List[Any]]]
    for k in keys:
        pts = [[r.get("step"), r[k], r.get("t")] for r in rows if isinstance(r.get(k), (int, float))]
        series[k] = downsample(pts, points)
    last = {}  # type: JSONObject
    for r in rows:  # the newest value of every key (eval metrics come on their own lines), this attempt's
        if status.this_attempt(rec, r) is not None:
            last.update(r)
    timed = [(float(r["t"]), float(r["step"])) for r in rows  # this attempt's: a restart's gap is no step
             if isinstance(r.get("t"), (int, float)) and isinstance(r.get("step"), (int, float)) and r["t"] >= since]
    prog = metricsrc.progress(job)
    attempts = rec.attempts or [{}]
    if float(prog.get("t") or 0) < float(attempts[-1].get("started_at") or 0):
        prog = {}  # an earlier attempt's bar
    prog, last, took = _with_unread(job, source, prog, last)
    if source is None and took:  # the log's first metrics, printed before the Collector's first read of them
        source = "log"
    if not prog.get("total"):
        hints = totals.run_hints(job.spec_data(), job.code)  # metrics.total, GPUJOB_MAX_*, run flags, its config
        # the total a source stated (the log's `step N/200` while the events are the metrics, an earlier attempt's)
        total = stated = metricsrc.known_total(job) or hints.get("max_steps")
        total = total or totals.total_from_epochs(rows, hints.get("epochs"))
        if total and not stated and rec.state == "succeeded":
            # an estimate from the epochs; the run went to its end, so its last step is the total
            total = max([int(r["step"]) for r in rows if isinstance(r.get("step"), (int, float))] or [total])
        prog = dict(prog, total=total) if total else prog
    return {"job": detail, "series": series, "latest": last, "rows": len(rows), "source": source,
            "progress": prog, "rate": prog.get("rate") or _rate(timed), "gpu": gpu_summary(job.gpu), "now": time.time()}


def _with_unread(job: JobDir, source: Optional[str], prog: Progress,
                 last: JSONObject) -> Tuple[Progress, JSONObject, bool]:
    """``prog`` and ``last`` with what the log printed since the Collector last read it: the
    step status shows is the log's newest, not one up to a collect interval old. A step is
    taken only when newer (the tail is parsed without the earlier lines' context). The third
    value: whether metric records from the tail were taken (with no source yet, the log is it)."""
    from remote.metrics import metricsrc

    last, fresh, took = metricsrc.with_unread(job, job.spec_data(), source, last)
    if metricsrc.step_value(fresh.get("step")) > metricsrc.step_value(prog.get("step")):
        prog = dict(prog, step=fresh["step"], t=fresh.get("t"), rate=fresh.get("rate") or prog.get("rate"))
    return prog, last, took


def _rate(timed: List[Tuple[float, float]]) -> Optional[float]:
    """Steps per second over the newest stretch of one attempt (at most the last 50 points)."""
    pts = timed[-50:]
    # keep the tail after the last step decrease (a restart resumes from an older step)
    for i in range(len(pts) - 1, 0, -1):
        if pts[i][1] < pts[i - 1][1]:
            pts = pts[i:]
            break
    # records read from the log in one go share the time of the read: only the newest step of
    # each read is at its time (counting the first read's older steps would inflate the rate)
    pts = [p for i, p in enumerate(pts) if i + 1 == len(pts) or pts[i + 1][0] != p[0]]
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])
