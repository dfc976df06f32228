"""Helpers for the bring-your-own tests: submit the examples unchanged, read their job folders."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from tests.conftest import REPO, run_cli
from tests.helpers import submit
from tests.helpers import wait_for as wait_until  # noqa: F401 (the byo tests' name)

BYO = REPO / "examples" / "bring-your-own"
# every variable a test run needs, on top of the example's own job file
QUIET = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
         "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}


def example(tmp_path: Path, kind: str, name: str) -> Path:
    """A copy of ``examples/bring-your-own/<kind>`` (train.py byte for byte) under a unique name."""
    d = tmp_path / name
    shutil.copytree(BYO / kind, d)
    assert (d / "train.py").read_bytes() == (BYO / kind / "train.py").read_bytes()
    return d / "job.yaml"


def submit_example(host: str, job: Path, run: str, **keys: object) -> str:
    """Submit ``job`` with its run line replaced (more steps, slower steps) and ``keys`` set."""
    sets = ["--set", f"run={run}", "--set", f"name={job.parent.name}", "--set", f"env={json.dumps(QUIET)}"]
    for k, v in keys.items():
        sets += ["--set", f"{k}={json.dumps(v)}"]
    return submit(host, job, *sets)["job_id"]


def job_dir(tmp_path: Path, host: str, job_id: str) -> Path:
    return tmp_path / ("local-root" if host == "local" else "remote-root") / "jobs" / job_id


def log_text(jd: Path) -> str:
    return (jd / "output.log").read_text(errors="replace") if (jd / "output.log").exists() else ""


def attempt_log(jd: Path, n: int) -> str:
    """The part of output.log written by attempt ``n``."""
    text = log_text(jd)
    start = text.index(f"==> gpujob: attempt {n} started")
    end = text.find(f"==> gpujob: attempt {n + 1} started", start)
    return text[start:end if end >= 0 else None]


def gpujob(*args: str, timeout: float = 300) -> dict:
    r = run_cli(*args, "--json", timeout=timeout)
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


def events(jd: Path) -> list[dict]:
    return [json.loads(x) for x in (jd / "events.jsonl").read_text().splitlines() if x.strip()]


def finished_steps(text: str) -> list[int]:
    """The ``finished at step N`` lines the HF and Lightning examples print."""
    return [int(x) for x in re.findall(r"finished at step (\d+)", text)]


def metric_steps(jd: Path, since: float = 0.0) -> list[int]:
    rows = [json.loads(x) for x in (jd / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [r["step"] for r in rows if "step" in r and "loss" in r and r.get("t", 0) >= since]
