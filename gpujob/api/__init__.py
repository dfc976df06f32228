"""The Python API: ``Client``, ``Job`` and typed results (docs/api.md). The CLI is a thin layer over it."""

from gpujob.api.client import Client, Job, PlacementInterrupted
from gpujob.api.results import (
    Comparison,
    CostReport,
    ExecResult,
    GuardReport,
    JobCost,
    JobList,
    JobStatus,
    JobSummary,
    MoveResult,
    PlotResult,
    PullResult,
    RerunResult,
    ResumeResult,
    RunList,
    SubmitResult,
    SweepReport,
    TensorBoardStop,
    TunnelInfo,
)

__all__ = [  # gpujob/__init__.py re-exports these lazily (its _API)
    "Client", "Comparison", "CostReport", "ExecResult", "GuardReport", "Job", "JobCost", "JobList", "JobStatus",
    "JobSummary", "MoveResult", "PlacementInterrupted", "PlotResult", "PullResult", "RerunResult", "ResumeResult",
    "RunList", "SubmitResult", "SweepReport", "TensorBoardStop", "TunnelInfo",
]
