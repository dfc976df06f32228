"""gpujob: run training jobs on rented GPU instances over SSH, supervised and resumable.

``gpujob.Client`` and ``gpujob.Job`` are the Python API (docs/api.md); they and the result
classes are loaded on first use, so that ``gpujob --help`` does not import them.
"""

from typing import Any

from gpujob.version import __version__

_API = {
    "Client", "Job", "PlacementInterrupted", "CostReport", "ExecResult", "GuardReport", "JobCost", "JobList",
    "JobStatus", "JobSummary", "MoveResult", "PlotResult", "PullResult", "ResumeResult", "SubmitResult",
    "TensorBoardStop", "TunnelInfo", "Comparison", "RerunResult", "RunList", "SweepReport",
}


def __getattr__(name: str) -> Any:
    if name in _API:
        from gpujob import api

        return getattr(api, name)
    raise AttributeError(f"module 'gpujob' has no attribute {name!r}")


__all__ = ["__version__", *sorted(_API)]


def __dir__() -> list:
    return sorted(list(globals()) + list(_API))
