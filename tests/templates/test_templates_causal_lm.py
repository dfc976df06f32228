"""causal-lm template (HF Trainer): stop request saves and exits 0, resume matches, divisor, TB folder."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "remote" / "ckpt"))
import checkpoints  # noqa: E402

from tests.helpers import needs  # noqa: E402
from tests.train_helpers import TEMPLATES, config_line, finish, job_env, metrics, run, runtime_dir, start  # noqa: E402

needs("transformers", "datasets")  # without importing them at collection: seconds of CPU in every worker

SCRIPT = TEMPLATES / "causal-lm" / "train.py"
COMMON = ["--block-size", "64", "--max-steps", "8", "--save-steps", "4", "--logging-steps", "1", "--seed", "5"]


def test_stop_resume_matches_uninterrupted_and_divisor(tmp_path: Path) -> None:
    rt = runtime_dir(tmp_path)
    cwd = TEMPLATES / "causal-lm"
    # A: uninterrupted; batch 4 with GPUJOB_BATCH_DIVISOR=2 -> per-device 2, accumulation 2.
    env_a = job_env(tmp_path / "a", rt, GPUJOB_BATCH_DIVISOR="2")
    a = start(SCRIPT, [*COMMON, "--batch-size", "4", "--grad-accum", "1"], env_a, cwd, tmp_path / "a.log")
    # B: same effective setup given directly; a stop request is pending from the start.
    job = tmp_path / "b"
    env_b = job_env(job, rt, GPUJOB_METRICS_FILE=str(tmp_path / "b.jsonl"))
    (job / "stop").touch()
    args_b = [*COMMON, "--batch-size", "2", "--grad-accum", "2"]
    b = start(SCRIPT, args_b, env_b, cwd, tmp_path / "b.log")
    rc_b, out_b = finish(b, tmp_path / "b.log", timeout=300)
    rc_a, out_a = finish(a, tmp_path / "a.log", timeout=300)
    assert rc_a == 0, out_a[-3000:]
    assert rc_b == 0, out_b[-3000:]

    cfg = config_line(out_a)
    assert (cfg["per_device_batch"], cfg["grad_accum"], cfg["batch_divisor"], cfg["effective_batch"]) == (2, 2, 2, 4)
    assert cfg["precision"] == "fp32" and cfg["optim"] == "adamw_torch"
    assert (config_line(out_b)["per_device_batch"], config_line(out_b)["grad_accum"]) == (2, 2)
    ref = metrics(tmp_path / "a" / "metrics.jsonl")
    assert sorted(ref) == list(range(1, 9))
    assert list((tmp_path / "a" / "tb").glob("events.out.tfevents.*")), "TensorBoard events in GPUJOB_TB_DIR"
    assert [p.name for p in checkpoints.list_checkpoints(tmp_path / "a" / "ckpt")] == ["checkpoint-4", "checkpoint-8"]

    assert "stop requested: saved step 1" in out_b
    assert (job / "stop.watch").exists()
    first = checkpoints.latest_complete(job / "ckpt")
    assert first is not None and first.name == "checkpoint-1"
    (job / "stop").unlink()

    # A half-written newer checkpoint (no trainer_state.json) must be skipped by the scan.
    half = job / "ckpt" / "checkpoint-6"
    half.mkdir()
    (half / "config.json").write_text("{}")
    env_c = dict(env_b, GPUJOB_ATTEMPT="2", GPUJOB_METRICS_FILE=str(tmp_path / "c.jsonl"))
    rc_c, out_c = run(SCRIPT, args_b, env_c, cwd, tmp_path / "c.log", timeout=300)
    assert rc_c == 0, out_c[-3000:]
    assert f"resuming from {first}" in out_c
    resumed = metrics(tmp_path / "c.jsonl")
    assert sorted(resumed) == list(range(2, 9))
    for s, loss in resumed.items():
        assert abs(loss - ref[s]) <= 1e-4 * abs(ref[s]), f"step {s}: {loss} vs {ref[s]}"
    assert checkpoints.latest_complete(job / "ckpt").name == "checkpoint-8"
    tb_runs = {p.parent for p in (job / "tb").rglob("events.out.tfevents.*")}
    assert tb_runs == {job / "tb"}, "one stable TensorBoard run folder across restarts"
