"""Auto-stop policies, each triggered by a tiny real job on the ``local`` host (seconds, not minutes)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpujob.bundle import import_remote
from gpujob.errors import SpecError
from tests.conftest import run_cli
from tests.helpers import ENDED, submit, wait_state

autostop = import_remote("run.autostop")

# A job that honours the stop file (as the runtime helper does): it saves, says so, exits 0.
JOB = r'''
import json, math, os, signal, sys, time
stop = os.environ["GPUJOB_STOP_FILE"]
signal.signal(signal.SIGTERM, lambda *a: open(stop, "a").close())  # a stop before the watch file: save too
open(stop + ".watch", "w").close()
mode = sys.argv[1]
metrics = open(os.environ["GPUJOB_METRICS_FILE"], "a")
def metric(**kw):
    metrics.write(json.dumps(kw) + "\n"); metrics.flush()
i = 0
while True:
    if os.path.exists(stop):
        os.makedirs(os.environ["GPUJOB_CKPT_DIR"] + "/step-%d" % i, exist_ok=True)
        print("checkpoint saved at step", i, flush=True)
        sys.exit(0)
    i += 1
    if mode == "print":
        print("working", i, flush=True)
    elif mode == "quiet" and i == 1:
        print("one line, then silence", flush=True)
    elif mode == "nan" and i == 5:
        metric(step=i, loss=float("nan"))
    elif mode == "plateau" and i % 2 == 0:
        metric(step=i, eval_loss=max(0.5, 1.0 - 0.1 * i))
    elif mode == "steps":
        metric(step=i, loss=1.0 / i)
    time.sleep(0.1)
'''


def job_file(tmp_path: Path, name: str, mode: str, policies: dict) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "main.py").write_text(JOB)
    spec = {"name": name, "run": f"python main.py {mode}", "stop": {"grace": "20s"},
            "autostop": {"check_every": "2s", **policies}}
    (d / "job.yaml").write_text(json.dumps(spec))
    return d / "job.yaml"


def test_parsers_and_validation() -> None:
    assert autostop.parse_duration("90s") == 90 and autostop.parse_duration("30m") == 1800
    assert autostop.parse_duration("8h") == 8 * 3600 and autostop.parse_duration(5) == 5
    assert autostop.parse_size("5GB") == 5 << 30 and autostop.parse_size("500MB") == 500 << 20
    assert autostop.validate({"max_runtime": "8h", "gpu_idle": {"below": 5, "for": "30m"}, "after": "shutdown",
                              "plateau": {"metric": "eval_loss", "mode": "min", "patience": 5, "min_delta": 0.001},
                              "disk_free_below": "5GB", "stall": "20m", "nan_loss": True, "budget": 40}) == []
    errs = autostop.validate({"max_runtim": "8h", "stall": "20 minutes", "after": "poweroff",
                              "plateau": {"mode": "avg"}, "gpu_idle": {"below": 5, "four": "1m"}})
    text = "\n".join(errs)
    for part in ("max_runtim", "stall", "after", "plateau.metric", "plateau.mode", "gpu_idle: unknown key 'four'"):
        assert part in text, text
    assert autostop.loss_is_bad({"loss": float("inf")}) == "loss"
    assert autostop.loss_is_bad({"eval_loss": "NaN"}) == "eval_loss"
    assert autostop.loss_is_bad({"loss": 0.5, "lr": float("nan")}) is None


def test_spec_rejects_bad_policy_with_position(tmp_path: Path) -> None:
    from gpujob.config.spec import load_spec

    (tmp_path / "job.yaml").write_text("run: python x.py\nautostop:\n  stall: soon\n  after: reboot\n")
    with pytest.raises(SpecError) as e:
        load_spec(tmp_path / "job.yaml")
    msg = str(e.value)
    assert "job.yaml:2:1" in msg and "stall" in msg and "after" in msg


def test_each_policy_stops_its_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an nvidia-smi stand-in on PATH: one GPU at 1% utilisation (the sampler and gpu_idle read it)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, 1, 100, 81920, 60.5, 40'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GPUJOB_GPU_SAMPLE", "0.5")
    cases = {
        "maxrt": ("print", {"max_runtime": "4s"}, "max_runtime"),
        "stall": ("quiet", {"stall": "3s"}, "stall"),
        "nan": ("nan", {"nan_loss": True}, "nan_loss"),
        "plateau": ("plateau", {"plateau": {"metric": "eval_loss", "mode": "min", "patience": 3, "min_delta": 0.01}},
                    "plateau"),
        # fires at its first check: one late enough for the job to have started its stop handling
        "disk": ("print", {"disk_free_below": "100000TB", "check_every": "4s"}, "disk_free_below"),
        "idle": ("print", {"gpu_idle": {"below": 5, "for": "3s"}}, "gpu_idle"),
        # utilisation is as low, but steps advance: not idle; the backstop ends it
        "busy": ("steps", {"gpu_idle": {"below": 5, "for": "3s"}, "max_runtime": "9s"}, "max_runtime"),
    }
    ids = {name: submit("local", job_file(tmp_path, name, mode, pol))["job_id"] for name, (mode, pol, _) in cases.items()}
    root = Path(os.environ["GPUJOB_LOCAL_ROOT"])
    for name, (_, _, why) in cases.items():
        st = wait_state("local", ids[name], ENDED, 60)
        assert st["state"] == "autostopped", (name, st)
        assert st["reason"].startswith("autostop: " + why), (name, st["reason"])
        assert st["exit_code"] == 0, (name, st)  # stopped gracefully: it saved first
        log = (root / "jobs" / ids[name] / "output.log").read_text()
        assert "checkpoint saved at step" in log, name
        assert (root / "jobs" / ids[name] / "gpu.jsonl").exists()
    idle = json.loads(run_cli("status", ids["idle"], "--host", "local", "--json").stdout)
    assert idle["ended_at"] - idle["started_at"] < 9


def test_budget_uses_the_host_price(ssh_host: str, tmp_path: Path) -> None:
    r = run_cli("host", "set", ssh_host, "--price", "3600")  # 1 CNY a second
    assert r.returncode == 0, r.stderr
    job_id = submit(ssh_host, job_file(tmp_path, "budget", "print", {"budget": 2}))["job_id"]
    st = wait_state(ssh_host, job_id, ENDED, 60)
    assert st["state"] == "autostopped" and st["reason"].startswith("autostop: budget 2"), st
