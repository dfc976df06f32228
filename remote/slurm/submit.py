"""A job handed to Slurm: what the cluster is asked is checked first (nothing is made or queued when it
cannot be met), then one ``sbatch --parsable`` of the job's batch script (remote/slurm/batch.py)."""

import os
import re
import shutil
from typing import List, Optional

from remote.core import slurmq
from remote.core.errors import AgentError
from remote.core.layout import JobDir, Root
from remote.core.spec import JobSpec
from remote.slurm import batch

SCRIPT = "slurm.sh"  # in the job's folder: what sbatch ran (and runs again after a requeue)
_WHERE = "the job file's slurm: section, or the host profile (gpujob host set HOST --partition P)"


def _limit_seconds(text: str) -> Optional[float]:
    """Slurm's time (``UNLIMITED``, ``30``, ``1:00:00``, ``2-00:00:00``) in seconds; None: no limit."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "INFINITE", "NONE", "N/A"):
        return None
    days, _, rest = text.rpartition("-")
    parts = [float(x) for x in rest.split(":")]
    if len(parts) == 1:
        secs = parts[0] * 60  # minutes alone
    else:
        while len(parts) < 3:
            parts.insert(0, 0.0)
        secs = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return secs + (float(days) * 86400 if days else 0.0)


def _node_gpus(partition: str) -> List[int]:
    """The GPUs each node of ``partition`` has, as its gres says (``gpu:4``, ``gpu:a100:8(S:0-1)``)."""
    p = slurmq.command("sinfo", "-h", "-N", "-p", partition, "-o", "%G", check=False)
    out = []
    for line in p.stdout.splitlines():
        n = 0
        for g in line.split(","):
            m = re.match(r"gpu(?::[^:(]+)?:(\d+)", g.strip())
            if m:
                n += int(m.group(1))
        out.append(n)
    return out


def check(spec: JobSpec) -> batch.Allotted:
    """Refuse what the cluster cannot give, before anything is made: an unknown partition, more nodes,
    GPUs or time than it has. Slurm's controller away or no Slurm client: refused too (SlurmError).
    Returns the GPUs per node to ask for (``gpus: N``; ``all`` a node's every GPU; ``auto`` the same,
    or none on a partition without GPUs: the CPU, as ``auto`` means on an instance) and the time limit."""
    sl = spec.slurm
    if shutil.which("sbatch") is None:
        raise slurmq.SlurmError(slurmq.MISSING.format("sbatch"), "install Slurm's client on the login node (Debian: "
                                "apt install slurm-client), or fix the PATH its login shell gets", "slurm_missing")
    part = slurmq.partition(sl.partition)
    if part is None:
        if sl.partition:
            known = slurmq.partitions()
            raise AgentError("Slurm has no partition {!r}{}: nothing was queued".format(
                sl.partition, " (its partitions: {})".format(", ".join(known)) if known else ""),
                "name one of them in " + _WHERE, "slurm_partition")
        raise AgentError("the cluster has no default partition and this job names none: nothing was queued",
                         "name a partition in " + _WHERE, "slurm_partition")
    name = part.get("PartitionName", sl.partition or "")
    total = int(part.get("TotalNodes") or 0)
    max_nodes = part.get("MaxNodes", "UNLIMITED")
    most = min([total] + ([int(max_nodes)] if max_nodes.isdigit() else [])) if total else None
    if most is not None and sl.nodes > most:
        raise AgentError("the job asks for {} nodes; partition {} gives at most {}: nothing was queued".format(
            sl.nodes, name, most), "lower nodes: in the job file, or pick another partition", "slurm_nodes")
    limit = _limit_seconds(part.get("MaxTime", ""))
    if sl.time and limit is not None and sl.time > limit:
        raise AgentError("the job asks for {} of time; partition {} allows at most {}: nothing was queued".format(
            _said(sl.time), name, part.get("MaxTime")), "lower slurm: time: in the job file (the job "
            "requeues itself at the limit and resumes from its checkpoint), or pick another partition", "slurm_time")
    gpus = batch.gres_gpus(spec)
    if spec.gpus in ("all", "auto"):
        gpus = max(_node_gpus(name) or [0])
        if not gpus and spec.gpus == "all":
            raise AgentError("gpus: all, and partition {} has no GPUs (no gres gpu on its nodes): nothing was "
                             "queued".format(name), "pick a partition with GPUs (sinfo -o '%P %G'), or gpus: auto "
                             "to run on the CPU where there are none", "slurm_gpus")
    elif gpus:
        have = _node_gpus(name)
        if max(have or [0]) < gpus:
            raise AgentError("the job asks for {} GPU(s) per node; partition {} {}: nothing was queued".format(
                gpus, name, "has no GPUs (no gres gpu on its nodes)" if not any(have) else
                "has at most {} per node".format(max(have))),
                "lower gpus: in the job file, or pick a partition with GPUs (sinfo -o '%P %G')", "slurm_gpus")
    return batch.Allotted(gpus, sl.time or _limit_seconds(part.get("DefaultTime", "")) or limit)


def _said(seconds: float) -> str:
    h, m = divmod(int(seconds) // 60, 60)
    return "{}h{:02d}m".format(h, m) if h else "{}m".format(m)


def queue(root: Root, job: JobDir, spec: JobSpec, allotted: batch.Allotted) -> str:
    """Write the job's batch script (what :func:`check` found the partition gives) and ``sbatch`` it; Slurm's job id. A refusal (an unknown account or
    QOS, a limit) is a SlurmError with sbatch's own words: nothing was queued."""
    path = job.path / SCRIPT
    try:
        path.write_text(batch.script(root, job, spec, allotted.gpus, allotted.limit))
        os.chmod(str(path), 0o755)
    except OSError as e:  # a full disk: no job, and nothing queued
        raise AgentError("could not write the job's batch script {}: {}: nothing was queued".format(path, e),
                         "free space under the root (gpujob doctor HOST), then submit again", "slurm_script") from None
    p = slurmq.command("sbatch", "--parsable", str(path), check=False)
    if p.returncode != 0:
        err = slurmq.error_of("sbatch", p.stderr or p.stdout)
        raise AgentError(err.message + ": nothing was queued", "fix what Slurm names in " + _WHERE
                         if err.code == "slurm" else err.remedy, err.code)
    job_id = p.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise AgentError("sbatch answered {!r}, not a job id".format(p.stdout.strip()[:200]),
                         "look at the cluster with squeue; gpujob doctor HOST", "slurm")
    slurmq.forget(job_id)
    return job_id
