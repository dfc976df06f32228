"""A command run inside a running Slurm job's allocation (``gpujob exec JOB`` on a Slurm host): one more
step of the job, started from the login node with ``srun --jobid``. ``--overlap`` lets it share the
CPUs and GPUs the job's own step holds (else it would wait for them until the job ends)."""

from typing import List, Optional

from remote.core import slurmq


def first_node(nodelist: str) -> str:
    """The first host of a Slurm node list (``n[1-2]`` -> ``n1``); "" when Slurm names none."""
    nodelist = nodelist.strip()
    if not nodelist or nodelist in ("(null)", "None", "N/A"):
        return ""
    if "[" not in nodelist:
        return nodelist.split(",")[0]
    p = slurmq.command("scontrol", "show", "hostnames", nodelist, check=False)
    names = p.stdout.split() if p.returncode == 0 else []
    return names[0] if names else ""


def srun(slurm_id: str, node: Optional[str], cwd: str, command: List[str], pty: bool = False) -> List[str]:
    """``srun`` of ``command`` as a step of job ``slurm_id``: one task on ``node`` (the first node
    of the job when None), in ``cwd``, with this process's environment (``--export=ALL``: the
    job's, which the caller set up); ``pty`` for an interactive shell."""
    out = ["srun", "--jobid={}".format(slurm_id), "--overlap", "--nodes=1", "--ntasks=1", "--export=ALL",
           "--chdir={}".format(cwd), "--quiet"]
    if node:
        out.append("--nodelist={}".format(node))
    if pty:
        out.append("--pty")
    return out + list(command)
