"""One status document (a row of ``ls``, ``status JOB``'s detail) read by field: each field of the
declaration (remote/view/statusdoc.py) as an attribute of its declared kind, None when absent or
null, so readers (the terminal's and the dashboard's views, the use cases that act on a job's state)
name fields, not keys. The reply check (replies.py) has already vouched for each field's kind."""

from __future__ import annotations

from typing import Any, Generic, TypeVar, cast

from gpujob.bundle import import_remote
from gpujob.jsontypes import JSONObject

DECLARED = import_remote("view.statusdoc")
T = TypeVar("T")


class Field(Generic[T]):
    """A declared field of the document, read as ``doc.get(name)`` (its kind is ``kind``)."""

    def __init__(self, kind: type[T]) -> None:
        self.kind = kind
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, view: View, owner: type | None = None) -> T | None:
        return cast("T | None", view.doc.get(self.name))  # the reply check vouched for its kind


class View:
    """A document ``doc`` (kept as it is) read by declared field."""

    __slots__ = ("doc",)

    def __init__(self, doc: JSONObject) -> None:
        self.doc = doc

    def __contains__(self, name: str) -> bool:
        """Whether the document holds ``name`` at all (null included): an absent field may read otherwise."""
        return name in self.doc


class BillingView(View):
    """A status document's ``billing`` (the agent's estimate), read by field of ``DECLARED.BILLING``."""

    __slots__ = ()

    currency = Field(str)
    cost = Field(float)
    projected_cost = Field(float)
    elapsed_s = Field(float)
    eta_s = Field(float)
    price_per_hour = Field(float)
    max_steps = Field(float)
    steps_per_s = Field(float)
    progress = Field(float)


class JobView(View):
    """A status document read by field of ``DECLARED.FIELDS``."""

    __slots__ = ()

    @property
    def billed(self) -> BillingView:
        """``billing`` read by field (empty when there is none)."""
        return BillingView(self.billing or {})

    job_id = Field(str)
    name = Field(str)
    project = Field(str)
    host = Field(str)
    state = Field(str)
    reason = Field(str)
    remedy = Field(str)
    lost_reason = Field(str)
    attempt = Field(int)
    attempts = Field(list)
    restart_base = Field(int)
    exit_code = Field(int)
    submitted_at = Field(float)
    started_at = Field(float)
    ended_at = Field(float)
    resumed_at = Field(float)
    next_attempt_at = Field(float)
    heartbeat = Field(float)
    supervisor_pid = Field(int)
    child_pid = Field(int)
    boot_id = Field(str)
    agent = Field(str)
    cgroup = Field(str)
    cuda_visible_devices = Field(str)
    gpus_held = Field(bool)
    waiting_for_gpus = Field(bool)
    queue_reason = Field(str)
    batch_divisor = Field(int)
    stray_noted = Field(bool)
    stopping = Field(str)
    killed = Field(list)
    survivors = Field(list)
    supervisor_unresponsive = Field(str)
    cgroup_note = Field(str)
    gpu_error = Field(str)
    kept_copy = Field(str)
    restored = Field(str)
    moves = Field(list)
    moved_to = Field(str)
    diagnosis = Field(dict)
    supervisor_note = Field(str)
    slurm_job = Field(str)
    slurm_nodes = Field(str)
    requeues = Field(int)
    slurm = Field(dict)
    log_size = Field(int)
    disk = Field(dict)
    last_metrics = Field(dict)
    metrics_source = Field(str)
    last_line = Field(str)
    gpu_now = Field(dict)
    mirror = Field(dict)
    now = Field(float)
    queue_position = Field(int)
    billing = Field(dict)
    stop_after_checkpoint = Field(dict)
    spec = Field(dict)
    hparams = Field(dict)
    log_tail = Field(list)
    checkpoints = Field(list)
    stray_checkpoints = Field(dict)
    artifacts = Field(list)
    latest_metrics = Field(dict)
    series = Field(dict)
    loss_key = Field(str)
    eval_metrics = Field(dict)
    gpu = Field(dict)
    steps_per_s = Field(float)
    max_steps = Field(int)
    eta_s = Field(float)
    elapsed_s = Field(float)
    cost = Field(float)
    nodes = Field(list)
    price_per_hour = Field(float)
    projected_cost = Field(float)
    instance = Field(str)
    currency = Field(str)
    unreachable = Field(str)
    last_seen = Field(float)


class ProgressView(View):
    """``watch``'s ``progress`` (the progress bar's newest reading), by field of ``DECLARED.PROGRESS``."""

    __slots__ = ()

    step = Field(float)
    total = Field(float)
    rate = Field(float)
    t = Field(float)


class WatchView(View):
    """``watch``'s document (``status JOB``'s detail and the figures beside it), by field of ``DECLARED.WATCH``."""

    __slots__ = ()

    job = Field(dict)
    series = Field(dict)
    latest = Field(dict)
    rows = Field(int)
    source = Field(str)
    progress = Field(dict)
    rate = Field(float)
    gpu = Field(dict)
    now = Field(float)

    @property
    def record(self) -> JobView:
        """``job`` read by field (empty when there is none)."""
        return JobView(self.job or {})

    @property
    def bar(self) -> ProgressView:
        """``progress`` read by field (empty when there is none)."""
        return ProgressView(self.progress or {})


def views(docs: list[Any]) -> list[JobView]:
    """``ls``'s rows, each read by field."""
    return [JobView(d) for d in docs]
