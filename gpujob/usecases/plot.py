"""``gpujob plot JOB``: the loss and metric curves of a job as a PNG (matplotlib, imported lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpujob.errors import GpujobError
from gpujob.transport.agent import Agent
from gpujob.usecases.watch import EVAL_PREFIXES, loss_key


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise GpujobError("gpujob plot needs matplotlib, which is not installed here",
                          "pip install 'gpujob[plot]' (from a checkout: pip install -e '.[plot]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_series(series: dict[str, list[list[Any]]], out: Path, title: str = "") -> list[str]:
    """Draw the curves of ``series`` (see ``figure``) to the PNG ``out``; returns the keys drawn."""
    fig, curves = figure(series, title)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(str(out), dpi=110)
    _pyplot().close(fig)
    return curves


def figure(series: dict[str, list[list[Any]]], title: str = "") -> tuple[Any, list[str]]:
    """Each metric against its step: the loss (and eval losses) on one panel, others below.

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
    plt = _pyplot()
    lk = loss_key(curves)
    loss_keys = [k for k in curves if k == lk or ("loss" in k.lower() and k.lower().startswith(EVAL_PREFIXES))]
    # the curves that say how training goes first; evaluation timings (eval_runtime, *_per_second) last
    others = sorted((k for k in curves if k not in loss_keys), key=lambda k: k.endswith(("_runtime", "_per_second")))
    panels = ([loss_keys] if loss_keys else []) + [[k] for k in others[:8]]
    note = "   ".join(f"{k} = {_fmt(series[k][0][1])}" for k in singles[:6])
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.6 * len(panels) + 0.9), squeeze=False)
    for ax, group in zip(axes[:, 0], panels):
        for k in group:
            pts = [p for p in series[k] if p[0] is not None] or [[i, p[1]] for i, p in enumerate(series[k])]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=k, marker="." if len(pts) < 30 else None)
        ys = [p[1] for k in group for p in series[k] if isinstance(p[1], (int, float))]
        if ys and min(ys) > 0 and max(ys) / min(ys) > 100:  # a loss over orders of magnitude
            ax.set_yscale("log")
        ax.set_ylabel(group[0] if len(group) == 1 else "loss")
        ax.grid(alpha=0.3)
        if len(group) > 1:
            ax.legend()
    axes[-1, 0].set_xlabel("step")
    if title:
        fig.suptitle(title)
    if note:
        fig.supxlabel(note, fontsize=8, color="0.3")
    # the layout engine keeps the suptitle and the note clear of the panels
    fig.set_layout_engine("constrained")
    return fig, curves


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def plot_job(agent: Agent, job: str, out: Path) -> dict[str, Any]:
    """Fetch every metric point (one remote command) and draw them to ``out``."""
    doc = agent.call("watch", ["--job", job, "--points", "0"])
    job_id = (doc.get("job") or {}).get("job_id", job)
    series = doc.get("series") or {}
    keys = plot_series(series, out, job_id)
    return {"job_id": job_id, "path": str(out), "keys": keys, "points": {k: len(series[k]) for k in keys},
            "values": {k: pts[0][1] for k, pts in series.items() if len(pts) == 1 and k != "max_steps"},
            "metrics_source": doc.get("source")}
