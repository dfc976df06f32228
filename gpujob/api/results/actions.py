"""What the job verbs that act return: submit, resume, move, pull, tunnel, plot, exec."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpujob.api.results.base import Result
from gpujob.jsontypes import JSONObject


@dataclass(frozen=True)
class SubmitResult(Result):
    """``submit``: where the job went and what the sync sent."""

    job_id: str = ""
    state: str = ""
    host: str = ""
    job_dir: str | None = None
    supervisor_pid: int | None = None
    sync: JSONObject = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    nodes: list[JSONObject] | None = None


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
    sync: JSONObject = field(default_factory=dict)


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
    tensorboard: JSONObject | None = None
    autodl_url: str | None = None
    installed: JSONObject | None = None


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
    values: JSONObject = field(default_factory=dict)
    metrics_source: str | None = None


@dataclass(frozen=True)
class ExecResult(Result):
    """``exec``: a command run on a host; ``output`` is stdout and stderr in order ("" when streamed);
    ``login_output`` what the host's login files printed before it, kept apart from ``output``."""

    host: str = ""
    command: str = ""
    exit_code: int = 0
    output: str = ""
    login_output: str = ""
