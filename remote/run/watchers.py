"""The supervisor's periodic tasks, each one ``Watcher``: checkpoint rotation, the kept copy, GPU sampling and
health, metrics, the checkpoint mirror, auto-stop and the stop after the next checkpoint.

``Watchers`` ticks them in their order on every turn of the supervisor's loop; each keeps its own
``interval`` (a tick before it is due does nothing) and the first one that names a reason to stop
the attempt ends that turn. One watcher that raises is said once in the agent log and skipped for
that turn: the others and the job go on (housekeeping never takes a job down).

A watcher sees the job through a :class:`JobContext` (the job, its live spec and status, the log,
its processes), never the whole supervisor.
"""

from pathlib import Path
from typing import Any, Callable, List, Optional, Protocol, Tuple

from remote.core.jobrecord import JobRecord
from remote.core.layout import JobDir, Root, agent_log
from remote.core.spec import JobSpec


class Watcher(Protocol):
    """One periodic task beside a running attempt."""

    name: str  # said in the agent log when it fails
    interval: float  # seconds between two looks (0: every turn of the loop)

    def tick(self, now: float) -> Optional[str]:
        """Look if due (``now``: time.monotonic() of this turn); a reason to stop the attempt, or None."""
        ...


class JobContext:
    """What the watchers, notifications and the mirror see of the supervisor: the job, its spec as it is
    now (``provision`` adds the environment it set up), its status, the log, its processes."""

    def __init__(self, root: Root, job: JobDir, spec: Callable[[], JobSpec], status: Callable[[], JobRecord],
                 ckpt_dir: Callable[[], Path], job_pids: Callable[[], List[int]], log_marker: Callable[[str], None],
                 heartbeat: Callable[[], None]) -> None:
        self.root, self.job = root, job
        self._spec, self._status, self._ckpt_dir = spec, status, ckpt_dir
        self.job_pids, self.log_marker, self.heartbeat = job_pids, log_marker, heartbeat
        self.notifier: Any = None  # remote.run.events.Notifier, once attached
        self.mirror: Any = None  # remote.run.mirror.Mirror, with checkpoint.mirror

    @property
    def spec(self) -> JobSpec:
        return self._spec()

    @property
    def status(self) -> JobRecord:
        return self._status()

    def ckpt_dir(self) -> Path:
        return self._ckpt_dir()

    def path_prefix(self) -> str:
        """The host profile's PATH prefix (where nvidia-smi may live), if any."""
        return self.spec.path_prefix


class Watchers:
    """The watchers in their order, each isolated from the others' failures."""

    def __init__(self, root: Root, job_id: str) -> None:
        self.root, self.job_id = root, job_id
        self.items: List[Watcher] = []
        self.failed: set = set()  # names whose failure was said

    def add(self, w: Optional[Watcher], first: bool = False) -> None:
        if w is not None:
            self.items.insert(0 if first else len(self.items), w)

    def tick(self, now: float) -> Tuple[Optional[str], Optional[Watcher]]:
        """Each watcher in order until one names a reason to stop: (that reason, that watcher)."""
        for w in self.items:
            try:
                reason = w.tick(now)
            except Exception as e:  # one watcher's bug must not stop the others or the job
                if w.name not in self.failed:
                    self.failed.add(w.name)
                    agent_log(self.root, "{}: the {} watcher failed (said once; it is tried again each turn): {}: {}"
                              .format(self.job_id, w.name, type(e).__name__, e))
                continue
            if reason:
                return reason, w
        return None, None


class GpuWatch:
    """GPU sampling into gpu.jsonl and the GPUs' health (remote/host/gpus.py's Sampler): a new GPU error is
    kept as a diagnosis and announced; with ``retry.move_after`` the job stops (its code saves a checkpoint)
    so that ``gpujob guard`` moves it to a sound host."""

    name = "GPU sampling"

    def __init__(self, ctx: JobContext, interval: float, save: Callable[..., None],
                 emit: Callable[..., None]) -> None:
        from remote.host import gpus

        self.ctx, self.save, self.emit = ctx, save, emit
        self.interval = interval
        self.sampler = gpus.Sampler(ctx.job.gpu, interval, ctx.path_prefix())

    def tick(self, now: float) -> Optional[str]:
        return self.sampler.tick(self)  # the sampler keeps its own clock (its samples' times)

    def gpu_error(self, found: str) -> Optional[str]:
        self.save(gpu_error=found)
        self.ctx.log_marker("GPU error: " + found)
        self.ctx.job.event("gpu_error", error=found)
        self.emit("gpu_error", reason=found)
        if self.ctx.spec.retry.move_after is not None:
            return "gpu_error: " + found
        return None


class MetricsWatch:
    """Metrics from TensorBoard events and the log (remote/metrics/metricsrc.py's Collector)."""

    name = "metrics"

    def __init__(self, ctx: JobContext, since: float) -> None:
        from remote.metrics import metricsrc

        self.ctx = ctx
        self.collector = metricsrc.Collector(ctx.job, ctx.spec, since)
        self.interval = metricsrc.EVERY
        self.attempt = 0

    def tick(self, now: float) -> Optional[str]:
        attempt = int(self.ctx.status.attempt or 0)
        if attempt != self.attempt:  # a new attempt (a restart, a resume): its event files are looked for at once
            self.attempt = attempt
            attempts = self.ctx.status.attempts
            self.collector.new_attempt(float(attempts[-1].get("started_at") or 0) if attempts else 0.0)
        return self.collector.tick(None)  # due by its own clock

    def final(self) -> None:
        """The attempt ended: its last lines and events, before any notification."""
        self.collector.collect(final=True)
