"""A run's total steps and epochs where its records do not say them: the job file's
``metrics.total``, the env, the run line's flags, a config file it names; and the total steps
from epochs and the steps the records show per epoch (status's progress and ETA, cost)."""

import math
import re
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence

from remote.core.spec import JobSpec, SpecLike

STEP_KEYS = ("max_steps", "max_train_steps", "max_iters", "max_iter", "num_steps", "total_steps", "train_steps", "num_iters", "iters")
EPOCH_KEYS = ("max_epochs", "num_train_epochs", "num_epochs", "n_epochs", "epochs")
_KEYS = "|".join(k.replace("_", "[_-]") for k in STEP_KEYS + EPOCH_KEYS)
RUN_FLAGS = re.compile(r"--(" + _KEYS + r")[= ](\d+)\b")
# a config file named on the run line (nanoGPT's config/train_x.py, a YAML): "max_iters = 5000", "epochs: 300"
CONFIG_LINE = re.compile(r"^\s*(" + "|".join(STEP_KEYS + EPOCH_KEYS) + r")\s*[=:]\s*(\d+)\s*(?:#.*)?$", re.M)
CONFIG_ARG = re.compile(r"(?:^|\s)([\w./-]+\.(?:py|ya?ml))(?=\s|$)")


def _hint_name(key: str) -> str:
    return "epochs" if "epoch" in key else "max_steps"


def config_hints(run: str, code: Optional[Path]) -> Dict[str, int]:
    """Totals from the files the run line names (``train.py config/x.py``, ``--config c.yaml``), in
    their order: top-level ``max_iters = 5000`` (Python) or ``epochs: 300`` (YAML, any depth)."""
    hints = {}  # type: Dict[str, int]
    if code is None:
        return hints
    for m in CONFIG_ARG.finditer(run):
        path = code / m.group(1)
        try:
            if path.stat().st_size > 1 << 20:
                continue
            text = path.read_text(errors="replace")
        except (OSError, ValueError):
            continue
        yaml = not path.name.endswith(".py")
        for km in CONFIG_LINE.finditer(text):
            if yaml or not km.group(0)[:1].isspace():  # Python: module level only
                hints[_hint_name(km.group(1))] = int(km.group(2))
    return hints


def run_hints(spec: SpecLike, code: Optional[Path] = None) -> Dict[str, int]:
    """``max_steps`` / ``epochs``: the job file's ``metrics.total``, else the env (GPUJOB_MAX_STEPS,
    GPUJOB_MAX_EPOCHS), else run flags (``--max_iters=500``, ``--epochs 300``), else a config file the
    run line names (read when ``code``, the job's code folder, is given)."""
    spec = JobSpec.of(spec)
    run = spec.run
    hints = config_hints(run, code)
    for m in RUN_FLAGS.finditer(run):
        hints[_hint_name(m.group(1).replace("-", "_"))] = int(m.group(2))
    env = spec.env
    for key, name in (("GPUJOB_MAX_STEPS", "max_steps"), ("GPUJOB_MAX_EPOCHS", "epochs")):
        try:
            if int(env.get(key) or 0) > 0:
                hints[name] = int(env[key])
        except (TypeError, ValueError):
            pass
    total = spec.metrics.get("total") or {}
    for key, name in (("steps", "max_steps"), ("epochs", "epochs")):
        if isinstance(total.get(key), int) and total[key] > 0:
            hints[name] = total[key]
    return hints


def total_from_epochs(rows: Sequence[Mapping[str, object]], epochs: Optional[int]) -> Optional[int]:
    """``epochs`` × steps per epoch, the latter read from the ``epoch`` the records carry.

    HF logs a fractional epoch (step 30 at epoch 0.75: 40 an epoch); Lightning and plain loops
    (``epoch 2 step 90``) log the epoch index, so each record bounds the steps per epoch: step s in
    epoch e (from 0) means s <= (e+1)*n and s > e*n. The middle of what every record allows (from
    the first epoch change on), times the epochs; the first change alone overshot (180 for 160).
    """
    if not epochs:
        return None
    lo, hi = 0.0, None  # type: float, Optional[float]
    seen = set()  # type: set
    for r in rows:
        e, step = r.get("epoch"), r.get("step")
        if not isinstance(e, (int, float)) or not isinstance(step, (int, float)):
            continue
        if e > 0 and e != int(e):
            return int(round(step / e * epochs))
        if e > 0 and step == e:  # a loop that counts only epochs: the log's epoch is its step (logparse)
            return int(epochs)
        seen.add(int(e))
        if e >= 0:
            lo = max(lo, step / (e + 1.0))
        if e > 0:
            hi = step / float(e) if hi is None else min(hi, step / float(e))
    if len(seen) < 2 or hi is None or hi < lo:
        return None  # no epoch change seen (or the records disagree: a restart's): no guess
    # records logged every g steps (Lightning's log_every_n_steps, a loop's print every 10): an epoch
    # is most likely a whole number of them; the middle of those the bounds allow (7.5..9 by 2: 8, not 8.25)
    g = 0
    steps = sorted({int(s) for s in (r.get("step") for r in rows) if isinstance(s, (int, float))})
    for a, b in zip(steps, steps[1:]):
        g = math.gcd(g, b - a)
    if g > 1:
        grid = [k * g for k in range(int(math.ceil(lo / g)), int(math.floor(hi / g)) + 1)]
        if grid:
            return int(round((grid[0] + grid[-1]) / 2.0 * epochs))
    return int(round((lo + hi) / 2.0 * epochs))
