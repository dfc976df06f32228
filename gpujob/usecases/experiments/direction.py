"""Which way a metric gets better: a run's "best" of a loss is its lowest value, of an accuracy or a
throughput its highest (docs/experiments.md, "Best and last").

The job file decides for the names it gives (``metrics: {maximize: [...], minimize: [...]}``, and a
sweep's ``metric`` with its ``direction``); any other metric goes by its name: a loss, an error, a
perplexity or a time is minimised, an accuracy, a score or a rate per second maximised, and a name
that says neither is minimised."""

from __future__ import annotations

from collections.abc import Mapping

MAXIMIZE, MINIMIZE = "maximize", "minimize"
# looked for first: "dice_loss", "top1_err" and "eval_runtime" are minimised whatever else they hold
MINIMIZED = ("loss", "err", "perplexity", "ppl", "wer", "cer", "mse", "mae", "nll", "runtime", "latency", "time",
             "fid", "cost", "gpu_hours", "regret")
MAXIMIZED = ("acc", "f1", "bleu", "rouge", "auc", "score", "map", "precision", "recall", "reward", "iou", "dice",
             "psnr", "ssim", "per_second", "per_sec", "_per_s", "/s", "throughput", "mfu", "tflops", "util")


def maximized(key: str, declared: Mapping[str, str] | None = None) -> bool:
    """Whether a higher ``key`` is better: as ``declared`` (metric -> maximize|minimize) says, else by its name."""
    if declared and key in declared:
        return declared[key] == MAXIMIZE
    k = key.lower()
    if any(w in k for w in MINIMIZED):
        return False
    return any(w in k for w in MAXIMIZED)


def direction(key: str, declared: Mapping[str, str] | None = None) -> str:
    return MAXIMIZE if maximized(key, declared) else MINIMIZE


def declared_of(metrics: Mapping[str, object], sweep: Mapping[str, object] | None = None) -> dict[str, str]:
    """metric -> maximize|minimize as a job file sets it: ``metrics.maximize``/``metrics.minimize``
    lists, and its sweep's ``metric`` and ``direction`` (the job file's lists win)."""
    out: dict[str, str] = {}
    sweep = sweep or {}
    metric, way = sweep.get("metric"), sweep.get("direction")
    if isinstance(metric, str) and way in (MAXIMIZE, MINIMIZE):
        out[metric] = str(way)
    for way in (MAXIMIZE, MINIMIZE):
        names = metrics.get(way)
        for name in names if isinstance(names, list) else []:
            if isinstance(name, str):
                out[name] = way
    return out


def better(key: str, a: float, b: float, declared: Mapping[str, str] | None = None) -> float:
    """The better of two values of ``key``."""
    return max(a, b) if maximized(key, declared) else min(a, b)
