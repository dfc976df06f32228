"""A job file's ``sweep:`` section, checked: the search space, the sampler and pruner, the limits.

    sweep:
      metric: eval_loss          # default: the job's loss
      direction: minimize        # or maximize
      method: tpe                # grid | random | tpe
      trials: 8                  # grid: every combination when left out
      parallel: 2                # trials at once (each goes through its host's GPU queue)
      pruner: median             # median | asha | none
      warmup_steps: 0            # no pruning before this step
      budget: 50                 # money, in the hosts' currency; max_gpu_hours: 4
      params:
        lr: [1e-4, 3e-4, 1e-3]   # these values
        wd: {low: 0.0, high: 0.1}
        layers: {low: 1, high: 4, int: true}
        lr0: {low: 1e-5, high: 1e-2, log: true}

A parameter that is a job-file key (``gpus``, ``env.X``) overrides it; any other is a ``run:`` argument.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, Union, cast

from gpujob.errors import SpecError
from gpujob.jsontypes import JSON

METHODS = ("grid", "random", "tpe")
PRUNERS = ("median", "asha", "none")
KEYS = ("metric", "direction", "method", "trials", "parallel", "pruner", "warmup_steps", "startup_trials",
        "budget", "max_gpu_hours", "params", "seed", "storage")


class Range(TypedDict, total=False):
    """A parameter searched between ``low`` and ``high`` (checked: both there, low below high)."""

    low: float
    high: float
    log: bool
    int: bool
    step: float


Space = dict[str, Union[list[JSON], Range]]  # each parameter: the values to try, or a range


@dataclass
class SweepSpec:
    params: Space
    metric: str | None = None
    direction: str = "minimize"
    method: str = "tpe"
    trials: int = 8
    parallel: int = 1
    pruner: str = "median"
    warmup_steps: int = 0
    startup_trials: int = 2
    budget: float | None = None
    max_gpu_hours: float | None = None
    seed: int | None = None
    storage: str | None = None  # an Optuna storage the lab shares (usecases/lab/storage.py); None: this laptop's
    errors: list[str] = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in KEYS}


def _num(errors: list[str], d: Mapping[str, object], key: str, kind: type, low: float, default: Any) -> Any:
    v = d.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and v != int(v)) or v < low:
        errors.append(f"sweep.{key}: expected a {'whole ' if kind is int else ''}number >= {low:g}, got {v!r}")
        return default
    return kind(v)


RANGE_KEYS = ("low", "high", "log", "int", "step")


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _range_problem(v: dict[str, Any]) -> str | None:
    """Why ``{low: A, high: B, ...}`` cannot be searched, or None when it can."""
    unknown = [str(k) for k in v if k not in RANGE_KEYS]
    if unknown:
        return f"unknown key {unknown[0]!r} in a range (known: {', '.join(RANGE_KEYS)})"
    for b in ("low", "high", "step"):
        if b in v and not _is_num(v[b]):
            return f"{b}: {v[b]!r} is not a number (write it as 0.001 or 1e-3)"
    if "low" not in v or "high" not in v:
        return "a range needs both low and high, e.g. {low: 1e-5, high: 1e-2}"
    if not v["low"] < v["high"]:
        return f"low ({v['low']}) must be below high ({v['high']})"
    if v.get("log") and v["low"] <= 0:
        return f"a log range needs low > 0 (got {v['low']})"
    return None


def _space(errors: list[str], params: Any) -> Space:
    if not isinstance(params, dict) or not params:
        errors.append("sweep.params: expected a mapping of parameters, e.g. params: {lr: [1e-4, 1e-3]}")
        return {}
    out: Space = {}
    for k, v in params.items():
        if isinstance(v, list) and v:
            out[str(k)] = v
        elif isinstance(v, dict):
            problem = _range_problem(v)
            if problem:
                errors.append(f"sweep.params.{k}: {problem}")
            else:
                out[str(k)] = cast(Range, v)  # _range_problem found none
        else:
            errors.append(f"sweep.params.{k}: expected a list of values or {{low: A, high: B}} (log: true, int: true)")
    return out


def parse(raw: dict[str, Any], source: str, overrides: Mapping[str, object] | None = None) -> SweepSpec:
    """The checked ``sweep:`` of ``source``, with ``overrides`` (command-line flags) on top; one error lists every problem."""
    d = {**raw, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    errors = [f"sweep.{k}: unknown key (known: {', '.join(KEYS)})" for k in d if k not in KEYS]
    space = _space(errors, d.get("params"))
    method = d.get("method", "tpe")
    if method not in METHODS:
        errors.append(f"sweep.method: {method!r} is not one of {', '.join(METHODS)}")
    if method == "grid":
        bad = [k for k, v in space.items() if not isinstance(v, list)]
        if bad:
            errors.append(f"sweep.params.{bad[0]}: a grid needs a list of values")
    pruner = d.get("pruner", "median")
    if pruner not in PRUNERS:
        errors.append(f"sweep.pruner: {pruner!r} is not one of {', '.join(PRUNERS)}")
    direction = d.get("direction", "minimize")
    if direction not in ("minimize", "maximize"):
        errors.append(f"sweep.direction: {direction!r} is not minimize or maximize")
    storage = d.get("storage")
    if storage is not None:
        from gpujob.usecases.lab.storage import check

        why = check(storage)
        if why:
            errors.append(f"sweep.storage: {why}")
            storage = None
    grid = len(list(itertools.product(*[v for v in space.values() if isinstance(v, list)]))) if method == "grid" else 0
    spec = SweepSpec(
        params=space, metric=d.get("metric") if isinstance(d.get("metric"), str) else None, direction=direction,
        method=method, trials=_num(errors, d, "trials", int, 1, grid or 8) or grid or 8,
        parallel=_num(errors, d, "parallel", int, 1, 1), pruner=pruner,
        warmup_steps=_num(errors, d, "warmup_steps", int, 0, 0), startup_trials=_num(errors, d, "startup_trials", int, 0, 2),
        budget=_num(errors, d, "budget", float, 0, None), max_gpu_hours=_num(errors, d, "max_gpu_hours", float, 0, None),
        seed=_num(errors, d, "seed", int, 0, None), storage=storage)
    if errors:
        raise SpecError(f"{len(errors)} problem(s) in the sweep of {source}:\n  " + "\n  ".join(errors),
                        "fix sweep: in the job file (docs/experiments.md); nothing was submitted")
    return spec
