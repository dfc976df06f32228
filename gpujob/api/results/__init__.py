"""What the API returns: plain dataclasses, one per kind of answer, data only (nothing is drawn).

Each result keeps the document the use case returned and reads its well-known keys into typed
fields. ``to_json()`` gives that document back unchanged: it is exactly what the command's
``--json`` prints (docs/json.md), agent keys that have no field of their own included, and a key
that the document left out stays out. The fields are frozen, so they cannot drift from it.

The classes live in modules by verb and load on first use (``results.JobStatus`` imports
``results.jobs`` only): making a frozen dataclass costs about 1 ms, and a ``status`` needs 3 of 19.
"""

from __future__ import annotations

import importlib
from typing import Any

from gpujob.api.results.base import TERMINAL, Result

_WHERE = {
    "jobs": ("JobSummary", "JobStatus", "JobList"),
    "actions": ("SubmitResult", "ResumeResult", "MoveResult", "PullResult", "TunnelInfo", "TensorBoardStop",
                "PlotResult", "ExecResult"),
    "costs": ("JobCost", "CostReport", "GuardReport"),
    "experiments": ("RunList", "Comparison", "RerunResult", "SweepReport"),
}
_MODULE = {name: mod for mod, names in _WHERE.items() for name in names}

__all__ = ["TERMINAL", "Result", *_MODULE]


def __getattr__(name: str) -> Any:
    mod = _MODULE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
