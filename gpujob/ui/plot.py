"""``gpujob plot``: a job's curves as a PNG (matplotlib, imported only when drawing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpujob.errors import GpujobError
from gpujob.usecases.jobs.plot import Series, layout


def pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise GpujobError("gpujob plot needs matplotlib, which is not installed here",
                          "pip install 'gpujob[plot]' (from a checkout: pip install -e '.[plot]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_series(series: Series, out: Path, title: str = "") -> list[str]:
    """Draw the curves of ``series`` (see ``figure``) to the PNG ``out``; returns the keys drawn."""
    fig, curves = figure(series, title)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(str(out), dpi=110)
    pyplot().close(fig)
    return curves


def figure(series: Series, title: str = "") -> tuple[Any, list[str]]:
    """Each metric against its step, in the panels of ``usecases.jobs.plot.layout``; single values as a note below."""
    lay = layout(series, title)
    plt = pyplot()
    note = "   ".join(f"{k} = {_fmt(series[k][0][1])}" for k in lay.singles[:6])
    fig, axes = plt.subplots(len(lay.panels), 1, figsize=(8, 2.6 * len(lay.panels) + 0.9), squeeze=False)
    for ax, group in zip(axes[:, 0], lay.panels):
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
    return fig, lay.curves


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
