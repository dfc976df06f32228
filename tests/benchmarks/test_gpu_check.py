"""The one-shot GPU check (benchmarks/gpu/run.sh) in its CPU dry run, so it cannot rot before
a GPU machine is at hand: every step runs for real (bench_tokens.py, a job whose OOM makes the
agent halve the batch, the agent sampling the tests' nvidia-smi stand-in, gpu_idle, doctor);
only the GPU is the stand-in and the OOM is raised by the training script on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

RUN = REPO / "benchmarks" / "gpu" / "run.sh"
SECTIONS = ["install", "bench", "bench_compile", "oom_retry", "gpu_sampling", "doctor", "preflight"]


def run_check(out: Path, *args: str, timeout: float = 560, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("GPUJOB_", "GPUCHECK_", "FAKE_SMI_"))}
    full.update(OUT=str(out), **env)
    return subprocess.run(["bash", str(RUN), "--cpu-dry-run", *args], env=full, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def leftovers(marker: str, scope: str = "") -> list[int]:
    """Processes whose command line or environment still names ``marker`` (the check's temp root
    prefix) and ``scope`` (this test's OUT folder: another run of the check on the machine is not ours)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                seen = (d / "cmdline").read_bytes() + (d / "environ").read_bytes()
            except OSError:
                continue
            if marker.encode() in seen and scope.encode() in seen:
                pids.append(int(d.name))
    return pids


@pytest.mark.slow
@pytest.mark.timeout(600)  # about 40 s on a quiet machine; the script's own step guards allow for a busy one
def test_cpu_dry_run_passes_every_step(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = run_check(out)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    doc = json.loads((out / "gpu-check.json").read_text())
    assert doc["mode"] == "cpu-dry-run" and doc["ok"] and doc["failed"] == [] and doc["skipped"] == []
    steps = doc["steps"]
    assert list(steps) == SECTIONS and all(steps[n]["ok"] for n in SECTIONS), {n: steps[n].get("error") for n in steps}

    assert steps["install"]["torch"].startswith("2.") and steps["install"]["installed"] == []  # the dry run installs nothing
    rows = {row["recipe"]: row for n in ("bench", "bench_compile") for row in steps[n]["rows"]}
    assert set(rows) == {"packed", "padded", "packed+compile"}
    assert rows["packed+compile"]["compiled"] and not rows["packed"]["compiled"]
    assert rows["packed"]["attention"] == rows["packed+compile"]["attention"] == "sdpa"
    assert all(row["useful_tokens_per_s"] > 0 and row["tflops"] > 0 for row in rows.values())
    assert rows["packed"]["useful_fraction_of_block_slots"] > rows["padded"]["useful_fraction_of_block_slots"]

    oom = steps["oom_retry"]
    assert [(a["reason"], a["batch_divisor"]) for a in oom["attempts"]] == [("oom", 1), (None, 2)]
    assert [(c["per_device_batch"], c["grad_accum"], c["effective_batch"]) for c in oom["configs"]] == [
        (oom["batch"], 1, oom["batch"]), (oom["batch"] // 2, 2, oom["batch"])]
    assert "torch.OutOfMemoryError: CUDA out of memory" in oom["oom_line"]
    log = (out / "oom-output.log").read_text()
    assert "restarting with GPUJOB_BATCH_DIVISOR=2" in log and "[gpucheck] done" in log

    smp = steps["gpu_sampling"]
    assert smp["state"] == "autostopped" and smp["reason"].startswith("autostop: gpu_idle")
    assert smp["agent_cpu"]["window_s"] > 0 and smp["agent_cpu"]["percent_of_one_core"] >= 0
    assert smp["gpu_jsonl"]["samples"] >= 2 and smp["nvidia_smi"]["path"].endswith("tests/stand_ins/nvidia-smi")
    samples = [json.loads(line) for line in (out / "gpu.jsonl").read_text().splitlines()]
    assert samples and samples[-1]["gpus"][0]["mem_total"] == 81920  # the stand-in's figures, parsed by the agent

    assert steps["doctor"]["nvidia"]["gpus"][0]["name"] == "NVIDIA H200 (stand-in)"
    assert json.loads((out / "doctor.json").read_text())["nvidia"]["driver"] == "580.0.0"

    pre = steps["preflight"]  # the stand-in's GPU is not torch's: the GPU steps are skipped and said so
    assert pre["disk"]["write_mbs"] > 0 and any("GPU steps" in s for s in pre["not_measured"]), pre
    assert pre["gpus"][0]["rated"]["card"] == "h200" and pre["seconds"] < 60

    summary = (out / "summary.md").read_text()
    assert "all steps passed" in summary and "| oom_retry | ok |" in summary and "packed+compile" in summary
    assert summary in r.stdout
    assert not leftovers("gpujob-gpucheck-")


def test_a_failing_step_is_reported_and_fails_the_run(tmp_path: Path) -> None:
    # nvidia-smi failing as it does without a driver: doctor finds no GPU
    r = run_check(tmp_path / "a", "--only", "doctor", FAKE_SMI_FAIL="1")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads((tmp_path / "a" / "gpu-check.json").read_text())
    assert doc["failed"] == ["doctor"] and not doc["ok"] and "install" in doc["skipped"]
    assert "no GPU" in doc["steps"]["doctor"]["error"]
    assert "FAILED: doctor" in r.stdout and "| doctor | FAILED: doctor found no GPU" in r.stdout

    # the step's time guard: the benchmark is killed, the JSON still written, nothing left running
    r = run_check(tmp_path / "b", "--only", "bench", GPUCHECK_BUDGET_SCALE="0.02")
    assert r.returncode == 1
    bench = json.loads((tmp_path / "b" / "gpu-check.json").read_text())["steps"]["bench"]
    assert not bench["ok"] and "timed out" in bench["error"]
    from tests.helpers import wait_for

    # killed as a group: the last of them may still be reaped for a moment after the check returned
    wait_for(lambda: not leftovers("bench_tokens.py", f"OUT={tmp_path / 'b'}"), 15, lambda: str(leftovers("bench_tokens.py")))
