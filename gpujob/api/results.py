"""What the API returns: plain dataclasses, one per kind of answer, data only (nothing is drawn).

Each result keeps the document the use case returned and reads its well-known keys into typed
fields. ``to_json()`` gives that document back unchanged: it is exactly what the command's
``--json`` prints (docs/json.md), agent keys that have no field of their own included, and a key
that the document left out stays out. The fields are frozen, so they cannot drift from it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from gpujob.bundle import import_remote

# the job states a job does not leave by itself
TERMINAL = import_remote("core.protocol").TERMINAL

R = TypeVar("R", bound="Result")


def _key(f: Any) -> str:
    return f.metadata.get("key", f.name)


@dataclass(frozen=True)
class Result:
    """A use case's document with typed fields over it."""

    doc: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls: type[R], doc: dict[str, Any]) -> R:
        """The result over ``doc`` (which it keeps as is); a field whose key is absent keeps its default."""
        values = {f.name: _convert(f.name, doc[_key(f)], cls) for f in fields(cls) if f.name != "doc" and _key(f) in doc}
        return cls(doc=doc, **values)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document of the command (a copy: changing it changes nothing here)."""
        return copy.deepcopy(self.doc)


def _convert(name: str, value: Any, cls: type) -> Any:
    """Lists of records become lists of their result class (``JobList.jobs``, ``CostReport.jobs``)."""
    item = _ITEMS.get((cls.__name__, name))
    return [item.from_json(v) for v in value] if item and isinstance(value, list) else value


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
    last_metrics: dict[str, Any] | None = None
    queue_position: int | None = None
    submitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def finished(self) -> bool:
        """The job is in a state it does not leave by itself."""
        return self.state in TERMINAL


@dataclass(frozen=True)
class JobStatus(JobSummary):
    """One job in detail: ``status JOB`` (the record plus series, GPU, rate, ETA, cost), ``stop``, ``wait``."""

    latest_metrics: dict[str, Any] = field(default_factory=dict)
    series: dict[str, list[list[Any]]] = field(default_factory=dict)
    loss_key: str | None = None
    eval_metrics: dict[str, Any] = field(default_factory=dict)
    gpu: dict[str, Any] | None = None
    steps_per_s: float | None = None
    max_steps: int | None = None
    eta_s: float | None = None
    elapsed_s: float | None = None
    cost: float | None = None
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    diagnosis: dict[str, Any] | None = None
    nodes: list[dict[str, Any]] | None = None
    survivors: list[int] = field(default_factory=list)  # processes of the job still running after a stop

    @property
    def stopped_for_certain(self) -> bool:
        """After ``stop()``: the job has ended and no process of it runs (found by every means the host allows)."""
        return self.finished and not self.survivors

    @property
    def metrics(self) -> dict[str, Any]:
        """The newest value of each metric (``latest_metrics``, else the record's ``last_metrics``)."""
        return dict(self.latest_metrics or self.last_metrics or {})

    @property
    def latest_checkpoint(self) -> str | None:
        """The newest complete checkpoint's name under ``ckpt/``, or None."""
        done = [c for c in self.checkpoints if c.get("complete")]
        return done[-1]["name"] if done else None


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


@dataclass(frozen=True)
class SubmitResult(Result):
    """``submit``: where the job went and what the sync sent."""

    job_id: str = ""
    state: str = ""
    host: str = ""
    job_dir: str | None = None
    supervisor_pid: int | None = None
    sync: dict[str, Any] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    nodes: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class ResumeResult(Result):
    """``resume``: the job queued again from its newest complete checkpoint."""

    job_id: str = ""
    state: str = ""
    supervisor_pid: int | None = None
    previous: str | None = None
    resume_from: str | None = None  # the checkpoint (under ckpt/) GPUJOB_RESUME names; None: none is complete
    incomplete: list[str] = field(default_factory=list)  # with none complete: the newest others and why


@dataclass(frozen=True)
class MoveResult(Result):
    """``move`` (and ``resume JOB --host OTHER``): the job goes on on another host."""

    job_id: str = ""
    from_host: str = field(default="", metadata={"key": "from"})
    to: str = ""
    source: str = ""
    source_where: str = ""
    checkpoint: str | None = None
    state: str = ""
    files: int = 0
    bytes: int = 0
    old_marked: bool = False
    old_unreachable: str | None = None
    sync: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PullResult(Result):
    """``pull``: what was fetched into ``dest`` and what was already there."""

    job_id: str = ""
    dest: str = ""
    files: int = 0
    bytes: int = 0
    unchanged: int = 0
    selected: str | None = None
    skipped: list[str] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)  # checkpoints written in code/, outside the checkpoint folder
    stray_hint: str | None = None  # how to fetch them, and to have gpujob see them next time
    held: list[str] = field(default_factory=list)  # left out: still being written, or changed while read
    refused: list[str] = field(default_factory=list)  # left out: names gpujob will not write here (a control character)
    refused_why: dict[str, str] = field(default_factory=dict)  # each refused name's reason
    note: str | None = None  # --latest with no checkpoint: the final model files brought instead

    @property
    def complete(self) -> bool:
        """Everything selected arrived (nothing was left out as being written or as a refused name)."""
        return not self.held and not self.refused


@dataclass(frozen=True)
class TunnelInfo(Result):
    """``tunnel``: the local end of a forward (and the TensorBoard behind it for a job)."""

    host: str = ""
    remote_port: int = 0
    local_port: int = 0
    url: str = ""
    note: str | None = None
    job_id: str | None = None
    tensorboard: dict[str, Any] | None = None
    autodl_url: str | None = None
    installed: dict[str, Any] | None = None


@dataclass(frozen=True)
class TensorBoardStop(Result):
    """``tunnel JOB --stop``: the TensorBoard a tunnel started for the job, stopped."""

    job_id: str = ""
    stopped: bool = False
    pid: int | None = None
    running: bool = False


@dataclass(frozen=True)
class PlotResult(Result):
    """``plot``: the PNG written and the curves on it."""

    job_id: str = ""
    path: str = ""
    keys: list[str] = field(default_factory=list)
    points: dict[str, int] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    metrics_source: str | None = None


@dataclass(frozen=True)
class ExecResult(Result):
    """``exec``: a command run on a host; ``output`` is stdout and stderr in order ("" when streamed)."""

    host: str = ""
    command: str = ""
    exit_code: int = 0
    output: str = ""


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
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GuardReport(Result):
    """``guard``: what happened to each guarded job ({job_id, action, move/notified, state, why})."""

    outcomes: list[dict[str, Any]] = field(default_factory=list)


_ITEMS: dict[Any, type[Result]] = {("JobList", "jobs"): JobSummary, ("CostReport", "jobs"): JobCost}


@dataclass(frozen=True)
class RunList(Result):
    """``runs``: the ledger's runs ({job_id, name, host, state, params, final, best, cost, ...}), best or newest first."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    total: int = 0
    shown: int = 0


@dataclass(frozen=True)
class Comparison(Result):
    """``compare``: what differs between runs (params, code, env), their metrics and curves side by side."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, list[Any]] = field(default_factory=dict)
    same_params: dict[str, Any] = field(default_factory=dict)
    code: dict[str, list[Any]] = field(default_factory=dict)
    env: dict[str, list[Any]] = field(default_factory=dict)
    final: dict[str, list[Any]] = field(default_factory=dict)
    best: dict[str, list[Any]] = field(default_factory=dict)
    series: dict[str, list[Any]] = field(default_factory=dict)
    plot: str | None = None


@dataclass(frozen=True)
class RerunResult(SubmitResult):
    """``rerun``: the submit of the new run, with its ``parent`` and the code it ran (``code_hash``, ``restored``)."""

    parent: str = ""
    code_hash: str | None = None
    restored: bool = False


@dataclass(frozen=True)
class SweepReport(Result):
    """``sweep`` / ``sweep status``: the sweep, its trials ({number, job_id, state, value, params}), the best, why it ended."""

    sweep: str = ""
    state: str = ""
    trials: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None
    spent: dict[str, Any] = field(default_factory=dict)
    ended: str | None = None
