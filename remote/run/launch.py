"""How the run command is launched: as written, or under torchrun (one node or several).

``run:`` stays the user's own command (``python train.py --lr 3e-4``); with
``launcher: torchrun`` its leading ``python``/``python3`` becomes
``python -m torch.distributed.run ...`` (the same interpreter, so the same environment).
"""

import os
import re
import shlex
import shutil
import subprocess
from typing import Dict, List

from remote.core.spec import JobSpec, SpecLike

PY_RE = re.compile(r"^(\s*)(?:exec\s+)?(python3?(?:\.\d+)?|\S*/python3?(?:\.\d+)?)((?:\s+-[uBOs]+)*)\s+(.*)$")
RDZV_PORT = 29400


def gpu_count() -> int:
    """GPUs this job may use: CUDA_VISIBLE_DEVICES if set, else nvidia-smi's list, else 0."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None and vis.strip():
        return len([v for v in vis.split(",") if v.strip()])
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return len([ln for ln in out.splitlines() if ln.startswith("GPU ")])


def procs_per_node(spec: SpecLike) -> int:
    """``gpus: N`` → N processes; ``all`` → every GPU (1 on a CPU host)."""
    spec = JobSpec.of(spec)
    gpus = spec.gpus
    if isinstance(gpus, int) and gpus > 0:
        return gpus
    allocated = spec.allocated
    if allocated:
        return len([d for d in str(allocated).split(",") if d.strip()])
    return max(1, gpu_count())


def torchrun_args(spec: SpecLike, attempt: int = 1) -> List[str]:
    spec = JobSpec.of(spec)
    node = spec.node
    args = ["--nproc-per-node={}".format(procs_per_node(spec))]
    if int(node.get("num_nodes", 1)) <= 1:
        return ["--standalone"] + args
    if node.get("slurm"):  # one torchrun per node under srun: the node's rank comes from the rendezvous
        return args + [
            "--nnodes={}".format(node["num_nodes"]), "--rdzv-backend=c10d",
            "--rdzv-endpoint={}:{}".format(node["master_addr"], node.get("port", RDZV_PORT)),
            "--rdzv-id={}".format(node.get("rdzv_id") or spec.job_id or spec.name),
            "--max-restarts={}".format(spec.retry.max_restarts)]
    return args + [
        "--nnodes={}".format(node["num_nodes"]),
        "--rdzv-backend=c10d",
        "--rdzv-endpoint={}:{}".format(node["master_addr"], node.get("port", RDZV_PORT)),
        # torchrun restarts its workers in place (--max-restarts); a node whose supervisor
        # restarts torchrun rejoins the same rendezvous, which runs on the first node
        "--rdzv-id={}".format(node.get("rdzv_id") or spec.job_id or spec.name),
        "--max-restarts={}".format(spec.retry.max_restarts),
        # the first node hosts the rendezvous store: say so, rather than let torchrun guess
        # from host names (which a container's /etc/hosts often gets wrong)
        "--rdzv-conf=is_host={}".format(1 if int(node["rank"]) == 0 else 0),
    ] + (
        # the address the other nodes reach this one at (the master address workers connect to)
        ["--local-addr={}".format(node["addrs"][int(node["rank"])])] if node.get("addrs") else []
    )


def command(spec: SpecLike, attempt: int = 1) -> str:
    """The shell command the supervisor runs for ``spec``."""
    spec = JobSpec.of(spec)
    run = spec.run
    if spec.launcher != "torchrun":
        return run
    lines = run.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        m = PY_RE.match(lines[i])
        if m and not m.group(4).startswith("-c "):
            indent, py, _flags, rest = m.groups()
            args = " ".join(shlex.quote(a) for a in torchrun_args(spec, attempt))
            line = "{} -m torch.distributed.run {} {}".format(py, args, rest)
            if spec.node.get("slurm"):
                line = on_slurm_nodes(int(spec.node["num_nodes"]), line)
            lines[i] = indent + line
            return "\n".join(lines)
    return run


def on_slurm_nodes(nodes: int, torchrun: str) -> str:
    """``torchrun`` once on each node of the Slurm allocation (srun, one task per node); the first
    node hosts the rendezvous store (each node's own SLURM_NODEID says which it is)."""
    head, sep, tail = torchrun.partition(" -m torch.distributed.run ")
    inner = "exec {}{}--rdzv-conf=is_host=$([ \"$SLURM_NODEID\" = 0 ] && echo 1 || echo 0) {}".format(head, sep, tail)
    return "srun --nodes={0} --ntasks={0} --ntasks-per-node=1 --kill-on-bad-exit=1 sh -c {1}".format(
        nodes, shlex.quote(inner))


def node_env(spec: SpecLike) -> Dict[str, str]:
    """GPUJOB_NODE_RANK, GPUJOB_NUM_NODES, GPUJOB_NODE_ADDRS, GPUJOB_GPUS_PER_NODE."""
    spec = JobSpec.of(spec)
    node = spec.node
    return {
        "GPUJOB_NODE_RANK": str(node.get("rank", 0)),
        "GPUJOB_NUM_NODES": str(node.get("num_nodes", 1)),
        "GPUJOB_NODE_ADDRS": ",".join(node.get("addrs") or []),
        "GPUJOB_GPUS_PER_NODE": str(procs_per_node(spec) if spec.launcher == "torchrun" else gpu_count()),
    }
