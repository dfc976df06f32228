"""What an attempt's run command is started with: its environment (``GPUJOB_*``, the host's and the
job's env, its secrets) and the launch spec (the spec plus the GPUs the job was given)."""

import os
from pathlib import Path
from typing import Dict, List

from remote.core import layout
from remote.core.jobrecord import JobRecord
from remote.core.layout import JobDir, Root
from remote.core.spec import JobSpec
from remote.run import launch


def launch_spec(spec: JobSpec, status: JobRecord) -> JobSpec:
    """The spec plus the GPUs this job was given (``gpus: all`` counts those)."""
    return spec.with_values(allocated=status.cuda_visible_devices)


def data_dir(root: Root, job: JobDir) -> Path:
    """The job's own data view (remote/data/datastore.py); a job made by an older agent has none and
    keeps the shared ``<root>/data`` it was submitted with."""
    view = job.path / "data"
    return view if view.is_dir() else root.data


def runtime_path(spec: JobSpec) -> List[str]:
    """What the run command gets on PYTHONPATH: the runtime helper and, unless
    ``runtime: {auto: false}``, the hook that adds gpujob's stop callback to Trainers."""
    runtime = layout.AGENT_DIR / "runtime"
    hook = [str(runtime / "autohook")] if spec.runtime_auto else []
    return hook + [str(runtime)]


def environment(root: Root, job: JobDir, spec: JobSpec, status: JobRecord, ckpt: Path, attempt: int,
                resume: str) -> Dict[str, str]:
    """The run command's environment for ``attempt``, resuming from ``resume`` ('' for none)."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("GPUJOB_") or k == "PYTHONPATH":
            env.pop(k)
    ckpt.mkdir(parents=True, exist_ok=True)
    tb = spec.tensorboard_logdir
    tb_dir = str((job.code / tb).resolve()) if tb else str(job.tb)
    env.update({
        "GPUJOB_JOB_ID": job.id,
        "GPUJOB_JOB_DIR": str(job.path),
        "GPUJOB_CKPT_DIR": str(ckpt),
        "GPUJOB_TB_DIR": tb_dir,
        "GPUJOB_RESUME": resume,
        "GPUJOB_ATTEMPT": str(attempt),
        "GPUJOB_METRICS_FILE": str(job.metrics),
        "GPUJOB_STOP_FILE": str(job.stop_file),
        "GPUJOB_KEEP": str(spec.checkpoint.keep),
        "GPUJOB_BATCH_DIVISOR": str(status.batch_divisor),
        "GPUJOB_DATA_DIR": str(data_dir(root, job)),
        "PYTHONPATH": os.pathsep.join(runtime_path(spec) + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
        "PYTHONUNBUFFERED": "1",
    })
    env.setdefault("HF_HOME", str(root.root / "cache" / "huggingface"))
    if status.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = status.cuda_visible_devices
    env.update(launch.node_env(launch_spec(spec, status)))
    env.update(spec.host_env)
    env.update(spec.env)
    if spec.env.get("PYTHONPATH") is not None:  # the user's own path comes after ours
        env["PYTHONPATH"] = os.pathsep.join(runtime_path(spec) + [env["PYTHONPATH"]])
    wanted = set(spec.secrets)  # notification keys stay with the agent
    env.update({k: v for k, v in job.secrets_data().items() if k in wanted})
    # the job's identity wins over any env: stop finds the job's processes by it
    env.update(GPUJOB_JOB_ID=job.id, GPUJOB_JOB_DIR=str(job.path), GPUJOB_STOP_FILE=str(job.stop_file),
               GPUJOB_ATTEMPT=str(attempt), GPUJOB_RESUME=resume)
    return env
