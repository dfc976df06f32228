"""Whether a failed attempt starts again, and when: the diagnosis of its end, ``retry:`` (causes,
restarts, backoff, halving the batch after a CUDA OOM) and GPUs gone from the host."""

from typing import Any, Dict

from remote.core.jobrecord import JobRecord
from remote.core.layout import JobDir
from remote.core.protocol import backoff
from remote.core.spec import JobSpec

MAX_WAIT = 3600.0  # the longest wait between two attempts
# causes a plain ``error`` in retry.on does not cover: each must be named to be retried
NAMED_ONLY = ("oom", "nan", "nccl", "signal")


def should_retry(spec: JobSpec, attempt: int, cause: str) -> bool:
    """Whether attempt ``attempt``, ended by ``cause``, is started again (retry.on not given: a signal
    gpujob did not send, a watchdog, the platform, is one a user expects to survive)."""
    retry = spec.retry
    if attempt > retry.max_restarts:
        return False
    on = retry.on
    return cause in on or (cause not in NAMED_ONLY and "error" in on)


def classify(job: JobDir, rc: int, oom: Any) -> Dict[str, Any]:
    """The diagnosis of the attempt that just ended (its part of the log, its exit status)."""
    from remote.run import diagnose

    killed = oom.killed() if rc in (137, -9) and oom is not None else None
    return diagnose.diagnose(job.log, rc, metrics=job.metrics, oom_killed=killed)


def halves_batch(spec: JobSpec, diag: Dict[str, Any]) -> bool:
    """A CUDA out of memory with ``retry.on_oom: halve_batch``: the next attempt gets half the batch."""
    return diag["cause"] == "oom" and bool(diag.get("gpu")) and spec.retry.on_oom == "halve_batch"


def wait_before(spec: JobSpec, attempt: int, status: JobRecord) -> float:
    """Seconds before the attempt after ``attempt``: attempts before a resume or a move do not count,
    the wait starts again from retry.backoff."""
    return backoff(attempt - int(status.restart_base or 0), spec.retry.backoff, MAX_WAIT)


def gpus_gone(spec: JobSpec) -> str:
    """Why the GPUs the job asks for are gone from this host now (the driver failed, the instance
    came back without them), else ""."""
    from remote.host import gpus

    n = gpus.wanted(spec)
    return gpus.lacking(*gpus.probe(spec.path_prefix), n) if n is not None else ""
