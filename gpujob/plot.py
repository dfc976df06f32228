"""``gpujob plot JOB``: the loss and metric curves of a job as a PNG (matplotlib, imported lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpujob.agent import Agent
from gpujob.errors import GpujobError
from gpujob.watch import EVAL_PREFIXES, loss_key


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise GpujobError("gpujob plot needs matplotlib, which is not installed here",
                          "pip install matplotlib (or: pip install -e '.[dev]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_series(series: dict[str, list[list[Any]]], out: Path, title: str = "") -> list[str]:
    """Draw each metric against its step: the loss (and eval losses) on one panel, others beside.

    Returns the keys drawn.
    """
    keys = [k for k, pts in series.items() if pts and k != "max_steps"]
    if not keys:
        raise GpujobError(f"no metrics to plot{' for ' + title if title else ''}",
                          "the job writes metrics as JSON lines to $GPUJOB_METRICS_FILE, e.g. "
                          '{"step": 10, "loss": 0.5} (the runtime helper does it for you)')
    plt = _pyplot()
    lk = loss_key(keys)
    loss_keys = [k for k in keys if k == lk or ("loss" in k and k.startswith(EVAL_PREFIXES))]
    others = [k for k in keys if k not in loss_keys]
    panels = ([loss_keys] if loss_keys else []) + [[k] for k in others[:8]]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.6 * len(panels) + 0.6), squeeze=False)
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
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(str(out), dpi=110)
    plt.close(fig)
    return keys


def plot_job(agent: Agent, job: str, out: Path) -> dict[str, Any]:
    """Fetch every metric point (one remote command) and draw them to ``out``."""
    doc = agent.call("watch", ["--job", job, "--points", "0"])
    job_id = (doc.get("job") or {}).get("job_id", job)
    series = doc.get("series") or {}
    keys = plot_series(series, out, job_id)
    return {"job_id": job_id, "path": str(out), "keys": keys, "points": {k: len(series[k]) for k in keys}}
