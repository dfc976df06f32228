"""The Python API: ``Client``, ``Job`` and typed results (docs/api.md). The CLI is a thin layer over it.

The result classes load on first use (``gpujob.api.results``): a command imports only its own."""

from typing import Any

from gpujob.api.client import Client, Job, PlacementInterrupted

_RESULTS = {
    "Comparison", "CostReport", "ExecResult", "GuardReport", "JobCost", "JobList", "JobStatus", "JobSummary",
    "MoveResult", "PlotResult", "PullResult", "RerunResult", "ResumeResult", "RunList", "SubmitResult",
    "SweepReport", "TensorBoardStop", "TunnelInfo",
}

__all__ = ["Client", "Job", "PlacementInterrupted", *sorted(_RESULTS)]  # gpujob/__init__.py re-exports these lazily (its _API)


def __getattr__(name: str) -> Any:
    if name in _RESULTS:
        from gpujob.api import results

        return getattr(results, name)
    raise AttributeError(f"module 'gpujob.api' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_RESULTS))
