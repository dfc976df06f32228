"""``gpujob plot JOB``: every metric point of a job, laid out in panels; ``gpujob.ui.plot`` draws the PNG."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from gpujob.errors import GpujobError
from gpujob.jsontypes import JSON, JSONObject
from gpujob.transport.agent import Agent
from gpujob.transport.jobview import WatchView
from gpujob.usecases.jobs.watch import EVAL_PREFIXES, loss_key

Series = dict[str, list[list[Any]]]  # metric key → [[step, value, t], ...]


@dataclass
class Layout:
    """What a plot shows: the curves, grouped in panels top to bottom, and the single values."""

    curves: list[str]
    panels: list[list[str]]
    singles: list[str]


def layout(series: Series, title: str = "") -> Layout:
    """The loss (and eval losses) on one panel, other metrics one panel each, training ones first.

    A metric with a single point (``train_runtime``, ``total_flos``, a final score) is no curve:
    it is written as text under the panels instead of getting a panel of its own.
    """
    keys = [k for k, pts in series.items() if pts and k != "max_steps"]
    curves = [k for k in keys if len(series[k]) > 1]
    singles = [k for k in keys if len(series[k]) == 1]
    if not curves:
        raise GpujobError(f"no metric curves to plot{' for ' + title if title else ''}"
                          + (f" (single values only: {', '.join(singles[:5])})" if singles else ""),
                          "gpujob reads $GPUJOB_METRICS_FILE lines ({\"step\": 10, \"loss\": 0.5}), TensorBoard "
                          "event files, or what the log prints (HF Trainer dicts, tqdm bars, loss=...); "
                          "plot again once the job has logged twice")
    lk = loss_key(curves)
    loss_keys = [k for k in curves if k == lk or ("loss" in k.lower() and k.lower().startswith(EVAL_PREFIXES))]
    # the curves that say how training goes first; evaluation timings (eval_runtime, *_per_second) last
    others = sorted((k for k in curves if k not in loss_keys), key=lambda k: k.endswith(("_runtime", "_per_second")))
    return Layout(curves, ([loss_keys] if loss_keys else []) + [[k] for k in others[:8]], singles)


def plot_job(agent: Agent, job: str, out: Path, draw: Callable[[Series, Path, str], list[str]]) -> JSONObject:
    """Fetch every metric point (one remote command) and ``draw`` them to ``out`` (``gpujob.ui.plot.plot_series``)."""
    doc = agent.call("watch", ["--job", job, "--points", "0"])
    w = WatchView(doc)
    given = w.record.job_id
    job_id = given if isinstance(given, str) else job  # the reply check let no other id through
    series = w.series or {}
    keys = draw(series, out, job_id)
    listed: list[JSON] = [*keys]
    return {"job_id": job_id, "path": str(out), "keys": listed, "points": {k: len(series[k]) for k in keys},
            "values": {k: pts[0][1] for k, pts in series.items() if len(pts) == 1 and k != "max_steps"},
            "metrics_source": w.source}
