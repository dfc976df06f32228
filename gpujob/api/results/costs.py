"""What ``cost`` and ``guard`` return."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpujob.api.results.base import Result
from gpujob.jsontypes import JSONObject
from gpujob.usecases.jobs.cost import HostCost


@dataclass(frozen=True)
class JobCost(Result):
    """One job's line of ``cost``."""

    job_id: str | None = None
    host: str | None = None
    state: str | None = None
    elapsed_s: float | None = None
    cost: float | None = None
    currency: str | None = None
    price_per_hour: float | None = None
    projected_cost: float | None = None
    eta_s: float | None = None


@dataclass(frozen=True)
class CostReport(Result):
    """``cost``: per job, per host ({cost, currency, jobs, unpriced}), totals per currency."""

    jobs: list[JobCost] = field(default_factory=list)
    hosts: dict[str, HostCost] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GuardReport(Result):
    """``guard``: what happened to each guarded job ({job_id, action, move/notified, state, why})."""

    outcomes: list[JSONObject] = field(default_factory=list)
