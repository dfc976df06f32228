"""What a job saved, as its folder holds it: its checkpoints of every kind, checkpoints written where
gpujob does not look (stray), and model files that are no checkpoint (artifacts).

Read by ``resume`` (where to start again), the supervisor (its note on stray checkpoints), ``send``
(pull's refusal) and the status documents (remote/view/status.py).
"""

from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Set, Union

from remote.core import procs
from remote.core.jobrecord import JobRecord
from remote.core.layout import JobDir
from remote.core.spec import JobSpec, SpecLike

if TYPE_CHECKING:  # (the checkpoints package is imported where used: a verb may not need it)
    from remote.ckpt.checkpoints.kinds import CheckpointDoc
    from remote.ckpt.checkpoints.strays import Artifact


def _since(st: JobRecord) -> float:
    return float(st.started_at or st.submitted_at or 0)


def stray_checkpoints(job: JobDir, spec: SpecLike, st: JobRecord) -> Optional[Dict[str, str]]:
    """{dir, advice} when the job wrote checkpoints where gpujob does not look (in its code outside
    ``checkpoint.dir``: an HF ``output_dir="out"``; deeper below the checkpoint folder than discovery
    looks), else None."""
    spec = JobSpec.of(spec)
    try:
        from remote.ckpt import checkpoints

        rel = checkpoints.stray_dir(job.code, _since(st), job.ckpt, spec.checkpoint.pattern)
    except (ImportError, OSError):
        return None
    return {"dir": rel, "advice": checkpoints.stray_advice(rel)} if rel else None


def artifacts(job: JobDir, st: JobRecord) -> "List[Artifact]":
    """Model files the job wrote in its code folder that are no checkpoint (``mnist_cnn.pt`` saved at
    the end): ``pull --latest`` brings them when the job has no complete checkpoint."""
    try:
        from remote.ckpt import checkpoints

        return checkpoints.artifacts(job.code, _since(st), job.ckpt, job.job_spec().checkpoint.pattern)
    except (ImportError, OSError):
        return []


def checkpoint_list(job: JobDir, spec: SpecLike, live: bool) -> "List[CheckpointDoc]":
    """The job's checkpoints of every kind, oldest first: {name (under ckpt/), kind, step, complete, ...}.

    Only a job that may still run has processes whose open files count as "being written"."""
    spec = JobSpec.of(spec)
    try:
        from remote.ckpt import checkpoints

        pids: Union[List[int], Callable[[], Set[int]]] = (lambda: procs.job_pids(job.id, job_dir=str(job.path))) if live else []
        return [c.as_dict(job.ckpt) for c in checkpoints.find(job.ckpt, spec.checkpoint.pattern, pids)]
    except (ImportError, OSError):
        return []
