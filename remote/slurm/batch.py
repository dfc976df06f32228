"""The batch script ``sbatch`` gets for a job on a Slurm host: its ``#SBATCH`` lines from the job file
and the host profile, its body the agent's supervisor (the same one an instance runs)."""

import math
import shlex
import sys
from typing import List, NamedTuple, Optional

from remote.core import layout
from remote.core.errors import AgentError
from remote.core.layout import JobDir, Root
from remote.core.spec import JobSpec

# the signal before the time limit: the supervisor asks the script for a checkpoint, then requeues the job
WARN_SIGNAL = "USR1"
WARN_MIN, WARN_MAX = 30, 900  # s: the stop grace, within these
WARN_ENV = "GPUJOB_SLURM_WARN"  # the batch script tells the supervisor the warning's seconds
NAME_PREFIX = "gpujob:"  # squeue's NAME column: gpujob's job id after it


class Allotted(NamedTuple):
    """What the partition gives the job (remote/slurm/submit.py ``check``): GPUs per node, its time
    limit in seconds (the job's, else the partition's default or maximum; None: unlimited)."""
    gpus: int
    limit: Optional[float]


def gres_gpus(spec: JobSpec) -> int:
    """The GPUs per node ``gpus: N`` asks for (0: none, or ``all``/``auto``, which the partition resolves:
    remote/slurm/submit.py ``check``)."""
    g = spec.gpus
    if isinstance(g, int):
        return g
    if isinstance(g, str) and g.isdigit():
        return int(g)
    return 0


def warn_seconds(spec: JobSpec, limit: Optional[float] = None) -> int:
    """How long before the time limit Slurm signals the supervisor: the job's stop grace, bounded, and at
    most half the job's time ``limit`` (a warning longer than the run would come at its start)."""
    warn = min(max(spec.stop.grace, WARN_MIN), WARN_MAX)
    return int(min(warn, max(10.0, limit / 2)) if limit else warn)


def time_limit(seconds: float) -> str:
    """Slurm's ``--time`` as minutes (rounded up: a limit is never shorter than asked)."""
    return str(max(1, int(math.ceil(seconds / 60.0))))


def directives(job: JobDir, spec: JobSpec, gpus: int, limit: Optional[float] = None) -> List[str]:
    """The job's sbatch options, one per line, in the order a reader checks them; ``gpus`` per node, the
    job's time ``limit`` in seconds (None: none known)."""
    sl = spec.slurm
    out = ["--job-name={}{}".format(NAME_PREFIX, job.id),
           "--output={}".format(job.supervisor_log), "--open-mode=append",
           "--requeue",  # a preemption or a node failure queues it again (the supervisor resumes it)
           "--signal=B:{}@{}".format(WARN_SIGNAL, warn_seconds(spec, limit)),
           "--nodes={}".format(sl.nodes), "--ntasks-per-node=1"]
    if gpus:
        out.append("--gres=gpu:{}".format(gpus))
    for flag, value in (("partition", sl.partition), ("account", sl.account), ("qos", sl.qos),
                        ("constraint", sl.constraint), ("cpus-per-task", sl.cpus), ("mem", sl.mem)):
        if value:
            out.append("--{}={}".format(flag, value))
    if sl.time:
        out.append("--time={}".format(time_limit(sl.time)))
    for extra in sl.sbatch:
        if not extra.startswith("-"):
            raise AgentError("slurm: sbatch: {!r} is not an sbatch option: nothing was queued".format(extra[:80]),
                             "give options as sbatch takes them, one per item, such as --exclusive", "slurm_option")
    lines = out + list(sl.sbatch)
    for line in lines:  # one directive per line: a line break or a control character would start a command
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in line):
            raise AgentError("a Slurm option holds a line break or a control character ({!r}): nothing was "
                             "queued".format(line[:80]), "fix the job file's slurm: section or the host profile's "
                             "partition, account or qos", "slurm_option")
    return lines


def script(root: Root, job: JobDir, spec: JobSpec, gpus: int, limit: Optional[float] = None) -> str:
    """The batch script: directives, then the supervisor in place of the shell (``exec``), so Slurm's
    signals (the time-limit warning to the batch shell, a requeue's SIGTERM) reach it."""
    lines = ["#!/bin/sh", "# gpujob: job {} (written at submit; Slurm runs it again after a requeue)".format(job.id)]
    lines += ["#SBATCH {}".format(d) for d in directives(job, spec, gpus, limit)]
    lines += ["export PYTHONPATH={}".format(shlex.quote(str(layout.AGENT_DIR))),
              "export {}={}".format(WARN_ENV, warn_seconds(spec, limit)),  # the supervisor's share of it
              "cd {} || exit 1".format(shlex.quote(str(root.root))),
              "exec {} -m remote --root {} run {}".format(shlex.quote(sys.executable), shlex.quote(str(root.root)),
                                                         shlex.quote(job.id))]
    return "\n".join(lines) + "\n"
