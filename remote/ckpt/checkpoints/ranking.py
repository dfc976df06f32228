"""The best checkpoint: trainer_state.json's best, the one a script named best, a monitored value in
the names, or a metric in the job's history at each checkpoint's step."""

import json
import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Set

from .kinds import HF_STATE, Checkpoint, name_stem

BEST_NAME = re.compile(r"^(model[_-])?best([_-](model|checkpoint|ckpt))?$", re.I)  # a best kept by the script


def metric_mode(metric: str) -> str:
    """'min' for losses and errors, 'max' for the rest (accuracy, f1, bleu...)."""
    return "min" if re.search(r"loss|perplexity|ppl|error|wer|cer|mse|mae|rmse", metric) else "max"


def hf_best(complete: List[Checkpoint]) -> Optional[Checkpoint]:
    for c in reversed(complete):
        if c.kind != "hf":
            continue
        try:
            with open(str(c.path / HF_STATE)) as f:
                best = json.load(f).get("best_model_checkpoint")
        except (OSError, ValueError):
            continue
        if best:
            name = os.path.basename(str(best).rstrip("/"))
            for q in complete:
                if q.name == name:
                    return q
    return None


def by_name_metric(complete: List[Checkpoint], metric: str) -> Optional[Checkpoint]:
    scored = [c for c in complete if metric in c.metrics]
    if not scored:
        return None
    sign = 1.0 if metric_mode(metric) == "min" else -1.0
    return min(reversed(scored), key=lambda c: sign * c.metrics[metric])


def metric_history(job_path: Optional[Path], complete: List[Checkpoint], metric: str) -> Dict[int, float]:
    """step -> value of ``metric`` from metrics.jsonl, else from the newest trainer_state.json's log."""
    scores: Dict[int, float] = {}
    if job_path is not None:
        try:
            with open(str(job_path / "metrics.jsonl")) as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(rec, dict) and isinstance(rec.get(metric), (int, float)) and \
                            isinstance(rec.get("step"), (int, float)):
                        scores[int(rec["step"])] = float(rec[metric])
        except OSError:
            pass
    if scores:
        return scores
    for c in reversed(complete):
        if c.kind == "hf":
            try:
                with open(str(c.path / HF_STATE)) as f:
                    log = json.load(f).get("log_history") or []
            except (OSError, ValueError):
                continue
            for rec in log:
                if isinstance(rec, dict) and isinstance(rec.get(metric), (int, float)) and "step" in rec:
                    scores[int(rec["step"])] = float(rec[metric])
            break
    return scores


def best(found: List[Checkpoint], metric: Optional[str] = None, job_path: Optional[Path] = None
         ) -> Optional[Checkpoint]:
    """The best complete checkpoint: with no ``metric``, trainer_state.json's best_model_checkpoint,
    else the newest the script named best (``model_best.pth.tar``), else the one monitored value all
    names carry, else ``eval_loss`` (or ``val_loss``, ``test_loss``); a metric is looked up in the
    names first, then in the history (metrics.jsonl, trainer_state.json) at each one's step."""
    complete = [c for c in found if c.complete]
    if not complete:
        return None
    guessed = not metric
    if not metric:
        hf = hf_best(complete)
        if hf is not None:
            return hf
        kept = [c for c in complete if BEST_NAME.match(name_stem(c.name))]
        if kept:  # the script keeps its best itself (an image trainer's model_best.pth.tar, best.pt)
            return kept[-1]
        keys: Set[str] = set()
        for c in complete:
            keys.update(c.metrics)
        metric = sorted(keys)[0] if len(keys) == 1 else "eval_loss"
    named = by_name_metric(complete, metric)
    if named is not None:
        return named
    scores = metric_history(job_path, complete, metric)
    for other in ("val_loss", "test_loss") if guessed and not scores else ():  # what a log calls it
        scores = metric_history(job_path, complete, other)
        if scores:
            metric = other
            break
    if not scores:
        return None
    sign = 1.0 if metric_mode(metric) == "min" else -1.0
    ranked = []
    for c in complete:
        if c.step is None:
            continue
        at = [k for k in scores if k <= c.step]
        if at:
            ranked.append((sign * scores[max(at)], -c.step, c.name, c))
    if not ranked:
        return None
    ranked.sort(key=lambda t: t[:3])
    return ranked[0][3]
