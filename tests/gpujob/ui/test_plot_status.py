"""``gpujob plot`` and ``gpujob status JOB`` (-w): curves, throughput, ETA, GPU use, from one remote command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, run_cli
from tests.helpers import EXAMPLE, needs, submit, wait_for, wait_state, write_job

PROGRESS = """
import json, os, time
path = os.environ["GPUJOB_METRICS_FILE"]
for step in range(1, 121):
    time.sleep(0.05)
    rec = {"t": time.time(), "step": step, "loss": 2.0 / step, "max_steps": 120, "lr": 0.001}
    if step % 20 == 0:
        rec["eval_loss"] = 3.0 / step
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\\n")
print("done", flush=True)
"""


def test_plot_draws_a_png_from_the_tiny_example(tmp_path: Path) -> None:
    needs("torch", "matplotlib")
    job_id = submit("local", EXAMPLE)["job_id"]
    assert wait_state("local", job_id, ("succeeded", "failed"), timeout=120)["state"] == "succeeded"
    out = tmp_path / "curves" / "loss.png"
    r = run_cli("plot", job_id, "--host", "local", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["keys"] == ["loss"] and doc["points"]["loss"] == 20  # every 10th of 200 steps
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000

    st = json.loads(run_cli("status", job_id, "--host", "local", "--json").stdout)
    assert st["loss_key"] == "loss" and len(st["series"]["loss"]) == 20
    assert st["series"]["loss"][-1][0] == 200 and st["steps_per_s"] > 0
    assert st["gpu"] is None or isinstance(st["gpu"], dict)


def test_status_shows_rate_eta_eval_and_gpu(tmp_path: Path) -> None:
    job = write_job(tmp_path, "progress", PROGRESS, "python main.py")
    job_id = submit("local", job)["job_id"]
    jdir = tmp_path / "local-root" / "jobs" / job_id
    st: dict = {}

    def past_first_eval() -> bool:  # a moment while it runs
        st.clear()
        st.update(json.loads(run_cli("status", job_id, "--host", "local", "--json").stdout))
        return st["state"] != "running" or (st.get("latest_metrics") or {}).get("step", 0) >= 25

    wait_for(past_first_eval, 60, lambda: str(st.get("state")), interval=0.3)
    assert st["state"] == "running", st["state"]
    assert st["max_steps"] == 120 and st["steps_per_s"] > 1
    assert st["eta_s"] is not None and 0 < st["eta_s"] < 120
    assert "eval_loss" in st["eval_metrics"]
    assert st["elapsed_s"] > 0

    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120")
    w = subprocess.run([sys.executable, "-m", "gpujob.cli", "status", job_id, "--host", "local", "-w", "--interval", "0.5"],
                       capture_output=True, text=True, timeout=90, env=env)
    assert w.returncode == 0, w.stderr
    assert "succeeded" in w.stdout and "eval_loss" in w.stdout

    # GPU samples as the sampler writes them: now and average per GPU
    with open(jdir / "gpu.jsonl", "a") as f:
        for util, mem in ((20, 1000), (80, 3000)):
            f.write(json.dumps({"t": time.time(), "gpus": [{"index": 0, "util": util, "mem_used": mem, "mem_total": 8192,
                                                            "power": 100, "temp": 60}]}) + "\n")
        f.write("not json\n")
    st = json.loads(run_cli("status", job_id, "--host", "local", "--json").stdout)
    gpu = st["gpu"]
    assert gpu["now"][0]["util"] == 80
    assert gpu["avg"][0]["index"] == 0 and gpu["samples"] >= 2
    text = subprocess.run([sys.executable, "-m", "gpujob.cli", "status", job_id, "--host", "local"], capture_output=True,
                          text=True, env=env, timeout=60).stdout
    assert "gpu" in text and "80%" in text and "step 120/120" in text
    assert any(ch in text for ch in "▁▂▃▄▅▆▇█")


def test_sparkline_and_rate_helpers() -> None:
    from gpujob.ui.jobs import sparkline
    from remote.view.watch import _rate, downsample

    assert sparkline([3, 2, 1]) == "█▄▁"
    assert sparkline([float("nan")]) == ""
    assert downsample(list(range(10)), 4) == [0, 3, 6, 9]
    assert downsample([1, 2], 5) == [1, 2]
    # a restart resumes from an older step: the rate is that of the newest attempt
    assert _rate([(0, 0), (10, 100), (11, 50), (21, 70)]) == 2.0
    assert _rate([(0, 5)]) is None


def test_gpu_average_weighs_compacted_lines(tmp_path: Path) -> None:
    """A compacted line (w: seconds it averages) weighs w; raw samples weigh the sampling interval."""
    from remote.view.watch import gpu_summary

    recs = [{"t": 0, "w": 600, "gpus": [{"index": 0, "util": 10, "mem_used": None}]},
            {"t": 1000, "gpus": [{"index": 0, "util": 90, "mem_used": 100}]},
            {"t": 1005, "gpus": [{"index": 0, "util": 90, "mem_used": 100}]}]
    path = tmp_path / "gpu.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    g = gpu_summary(path)
    assert g is not None and g["now"][0]["util"] == 90 and g["samples"] == 3
    assert g["avg"] == [{"index": 0, "util": round((10 * 600 + 90 * 10) / 610, 1), "mem_used": 100.0}]
    assert gpu_summary(tmp_path / "absent.jsonl") is None


def test_autostop_summary_line() -> None:
    from gpujob.ui.jobs import autostop_summary

    line = autostop_summary({"max_runtime": "8h", "gpu_idle": {"below": 5, "for": "30m"}, "nan_loss": True,
                             "plateau": {"metric": "eval_loss", "mode": "min", "patience": 5}, "after": "shutdown"})
    assert line == "max_runtime 8h · gpu_idle <5% for 30m · nan_loss · plateau eval_loss (min, patience 5) · then shutdown"
    assert autostop_summary({"after": "shutdown"}) == ""


def test_status_names_what_a_checkpoints_number_counts() -> None:
    """accelerate's checkpoint_<n> counts saves, epoch_<n> (--checkpointing_steps epoch) epochs, step_<n>
    steps (each had read "save N", and epoch_2 "step 2")."""
    from rich.console import Console

    from gpujob.ui.jobs import job_panel

    for name, kind, said in (("checkpoints/checkpoint_2", "accelerate", "save 2"), ("epoch_2", "accelerate", "epoch 2"),
                             ("step_80", "accelerate", "step 80"), ("epoch=1-step=56.ckpt", "lightning", "step 56")):
        step = int(name.rsplit("_", 1)[-1]) if kind == "accelerate" else 56
        con = Console(width=200, record=True)
        con.print(job_panel({"job_id": "j", "host": "local", "state": "running",
                             "checkpoints": [{"name": name, "kind": kind, "step": step, "complete": True}]}))
        assert f"newest {name} ({kind}, {said})" in con.export_text(), con.export_text()
