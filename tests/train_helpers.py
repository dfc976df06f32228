"""Helpers for the template tests: run a training script the way the agent does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = REPO / "templates"


def runtime_dir(base: Path) -> Path:
    """A folder holding exactly what the agent puts on PYTHONPATH."""
    d = base / "runtime"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(TEMPLATES / "runtime" / "gpujob_runtime.py", d / "gpujob_runtime.py")
    shutil.copytree(REPO / "remote" / "ckpt" / "checkpoints", d / "gpujob_checkpoints",
                    ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    return d


def job_env(job: Path, runtime: Path, **extra: str) -> dict[str, str]:
    """The agent's variables for a job folder ``job`` (created), plus ``extra``."""
    for sub in ("ckpt", "tb", "data", "hf"):
        (job / sub).mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOB_")}
    env.update({
        "GPUJOB_JOB_ID": job.name, "GPUJOB_JOB_DIR": str(job), "GPUJOB_CKPT_DIR": str(job / "ckpt"),
        "GPUJOB_TB_DIR": str(job / "tb"), "GPUJOB_RESUME": "", "GPUJOB_ATTEMPT": "1",
        "GPUJOB_METRICS_FILE": str(job / "metrics.jsonl"), "GPUJOB_STOP_FILE": str(job / "stop"),
        "GPUJOB_BATCH_DIVISOR": "1", "GPUJOB_KEEP": "3", "GPUJOB_DATA_DIR": str(job / "data"),
        "HF_HOME": str(job / "hf"), "PYTHONPATH": str(runtime), "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
        "CUDA_VISIBLE_DEVICES": "",
    })
    env.update(extra)
    return env


def start(script: Path, args: list[str], env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen:
    """Start ``python script args`` with output into ``log``."""
    out = open(log, "wb")  # noqa: SIM115 - closed by the process object's owner via finish()
    return subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=str(cwd),
                            stdout=out, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen, log: Path, timeout: float = 300) -> tuple[int, str]:
    """Wait for ``proc``; (returncode, its output)."""
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return rc, log.read_text(errors="replace")


def run(script: Path, args: list[str], env: dict[str, str], cwd: Path, log: Path,
        timeout: float = 300) -> tuple[int, str]:
    return finish(start(script, args, env, cwd, log), log, timeout)


def metrics(path: Path, key: str = "loss") -> dict[int, float]:
    """step -> value of ``key`` from a metrics.jsonl (lines without it are skipped)."""
    out: dict[int, float] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if key in row and "step" in row:
            out[row["step"]] = row[key]
    return out


def config_line(output: str) -> dict:
    """The ``[gpujob] config {...}`` line a template prints."""
    for line in output.splitlines():
        if line.startswith("[gpujob] config "):
            return json.loads(line[len("[gpujob] config "):])
    raise AssertionError("no config line in output:\n" + output[-3000:])
