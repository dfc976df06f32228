"""The job records: ``ls``'s rows, ``status``'s detail, the list."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpujob.api.results.base import TERMINAL, Result
from gpujob.jsontypes import JSONObject


@dataclass(frozen=True)
class JobSummary(Result):
    """One row of ``ls``: the job record as the host's agent lists it."""

    job_id: str = ""
    host: str | None = None
    state: str = ""
    reason: str | None = None
    attempt: int = 0
    exit_code: int | None = None
    last_line: str = ""
    last_metrics: JSONObject | None = None
    queue_position: int | None = None
    submitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    unreachable: str | None = None  # the host did not answer: the row is the laptop's last knowledge (its error)
    last_seen: float | None = None  # when the laptop last saw the job so (unreachable rows)

    @property
    def finished(self) -> bool:
        """The job is in a state it does not leave by itself."""
        return self.state in TERMINAL


@dataclass(frozen=True)
class JobStatus(JobSummary):
    """One job in detail: ``status JOB`` (the record plus series, GPU, rate, ETA, cost), ``stop``, ``wait``."""

    latest_metrics: JSONObject = field(default_factory=dict)
    series: dict[str, list[list[Any]]] = field(default_factory=dict)
    loss_key: str | None = None
    eval_metrics: JSONObject = field(default_factory=dict)
    gpu: JSONObject | None = None
    steps_per_s: float | None = None
    max_steps: int | None = None
    eta_s: float | None = None
    elapsed_s: float | None = None
    cost: float | None = None
    checkpoints: list[JSONObject] = field(default_factory=list)
    diagnosis: JSONObject | None = None
    nodes: list[JSONObject] | None = None
    survivors: list[int] = field(default_factory=list)  # processes of the job still running after a stop

    @property
    def stopped_for_certain(self) -> bool:
        """After ``stop()``: the job has ended and no process of it runs (found by every means the host allows)."""
        return self.finished and not self.survivors

    @property
    def metrics(self) -> JSONObject:
        """The newest value of each metric (``latest_metrics``, else the record's ``last_metrics``)."""
        return dict(self.latest_metrics or self.last_metrics or {})

    @property
    def latest_checkpoint(self) -> str | None:
        """The newest complete checkpoint's name under ``ckpt/``, or None."""
        done = [c for c in self.checkpoints if c.get("complete")]
        name = done[-1].get("name") if done else None
        return name if isinstance(name, str) else None  # the agent names each checkpoint by its folder


@dataclass(frozen=True)
class JobList(Result):
    """``ls``: the jobs of every host asked, the hosts that did not answer, how many old ones were left out."""

    jobs: list[JobSummary] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    older: int = 0

    def __iter__(self) -> Any:
        return iter(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)
