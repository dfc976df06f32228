"""seq-cls template: exact resume after SIGKILL, stop request, batch divisor (real subprocesses)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "remote" / "ckpt"))
import checkpoints  # noqa: E402

from tests.helpers import needs, wait_for  # noqa: E402
from tests.train_helpers import TEMPLATES, config_line, finish, job_env, metrics, run, runtime_dir, start  # noqa: E402

needs("torch")  # without importing it at collection: seconds of CPU in every worker

SCRIPT = TEMPLATES / "seq-cls" / "train.py"
COMMON = ["--epochs", "2", "--max-length", "48", "--save-steps", "4", "--seed", "3"]


def subset(tmp: Path) -> list[str]:
    """Smaller copies of the template's data: 192 training examples (12 steps per epoch), 48 eval."""
    data = TEMPLATES / "seq-cls" / "data"
    (tmp / "train.jsonl").write_text("".join((data / "train.jsonl").read_text().splitlines(True)[:192]))
    (tmp / "eval.jsonl").write_text("".join((data / "eval.jsonl").read_text().splitlines(True)[:48]))
    return [*COMMON, "--train", str(tmp / "train.jsonl"), "--eval", str(tmp / "eval.jsonl")]


def test_sigkill_resume_is_exact_and_stop_request_saves(tmp_path: Path) -> None:
    rt = runtime_dir(tmp_path)
    cwd = TEMPLATES / "seq-cls"
    common = subset(tmp_path)
    # A: uninterrupted, batch 16 halved by GPUJOB_BATCH_DIVISOR=2 -> micro-batch 8, accumulation 2.
    env_a = job_env(tmp_path / "a", rt, GPUJOB_BATCH_DIVISOR="2")
    a = start(SCRIPT, [*common, "--batch-size", "16", "--grad-accum", "1"], env_a, cwd, tmp_path / "a.log")
    # B: the same effective setup given directly, slowed down, SIGKILLed mid-epoch after a save.
    job = tmp_path / "b"
    env_b = job_env(job, rt, GPUJOB_METRICS_FILE=str(tmp_path / "b.jsonl"))
    args_b = [*common, "--batch-size", "8", "--grad-accum", "2"]
    b = start(SCRIPT, [*args_b, "--step-delay", "0.1"], env_b, cwd, tmp_path / "b.log")

    def saved_mid_epoch() -> bool:
        latest = checkpoints.latest_complete(job / "ckpt")
        return latest is not None and checkpoints.step_of(latest) >= 4

    assert wait_for(saved_mid_epoch, timeout=240, what=lambda: (tmp_path / "b.log").read_text(), interval=0.02)
    os.kill(b.pid, signal.SIGKILL)
    rc_b, out_b = finish(b, tmp_path / "b.log")
    assert rc_b == -signal.SIGKILL

    rc_a, out_a = finish(a, tmp_path / "a.log")
    assert rc_a == 0, out_a
    cfg_a = config_line(out_a)
    assert (cfg_a["per_device_batch"], cfg_a["grad_accum"], cfg_a["batch_divisor"]) == (8, 2, 2)
    assert cfg_a["effective_batch"] == 16
    cfg_b = config_line(out_b)
    assert (cfg_b["per_device_batch"], cfg_b["grad_accum"], cfg_b["batch_divisor"]) == (8, 2, 1)
    ref = metrics(tmp_path / "a" / "metrics.jsonl")
    total = cfg_a["total_steps"]
    assert sorted(ref) == list(range(1, total + 1))

    resume = checkpoints.latest_complete(job / "ckpt")
    k = checkpoints.step_of(resume)
    assert 4 <= k < cfg_a["steps_per_epoch"], "the kill should land mid-epoch"
    assert "done" not in out_b
    killed = metrics(tmp_path / "b.jsonl")
    assert all(killed[s] == ref[s] for s in killed)

    # C: resume with a stop request already pending: one step, save, exit 0.
    (job / "stop").touch()
    env_c = dict(env_b, GPUJOB_RESUME=str(resume), GPUJOB_ATTEMPT="2", GPUJOB_METRICS_FILE=str(tmp_path / "c.jsonl"))
    rc_c, out_c = run(SCRIPT, args_b, env_c, cwd, tmp_path / "c.log")
    assert rc_c == 0, out_c
    assert f"resumed from {resume}" in out_c and "stop requested" in out_c
    assert (job / "stop.watch").exists()
    stopped_at = checkpoints.latest_complete(job / "ckpt")
    assert checkpoints.step_of(stopped_at) == k + 1
    (job / "stop").unlink()

    # D: resume from the stop checkpoint and finish.
    env_d = dict(env_b, GPUJOB_RESUME=str(stopped_at), GPUJOB_ATTEMPT="3", GPUJOB_METRICS_FILE=str(tmp_path / "d.jsonl"))
    rc_d, out_d = run(SCRIPT, args_b, env_d, cwd, tmp_path / "d.log")
    assert rc_d == 0, out_d

    resumed = {**metrics(tmp_path / "c.jsonl"), **metrics(tmp_path / "d.jsonl")}
    assert sorted(resumed) == list(range(k + 1, total + 1))
    for s in resumed:
        assert resumed[s] == ref[s], f"step {s}: {resumed[s]!r} != {ref[s]!r}"
    acc_ref = metrics(tmp_path / "a" / "metrics.jsonl", "eval_accuracy")
    assert metrics(tmp_path / "d.jsonl", "eval_accuracy") == acc_ref
    # Rotation kept the newest GPUJOB_KEEP=3; best checkpoint outside rotation.
    names = [p.name for p in checkpoints.list_checkpoints(job / "ckpt")]
    assert names[-1] == f"step-{total}" and len(names) <= 3
    assert (job / "ckpt" / "best" / checkpoints.COMPLETE_MARKER).exists()
