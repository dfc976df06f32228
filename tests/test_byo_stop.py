"""`gpujob stop` on scripts that never import gpujob: the HF and Lightning Trainer hook saves at
the next step and exits 0 within the grace, `gpujob resume` continues from that step; a plain
loop gets SIGINT (its KeyboardInterrupt handler saves) and resumes to an uninterrupted run's
exact weights. The examples run unchanged (tests/byo_helpers.py copies them byte for byte)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.byo_helpers import (
    QUIET,
    attempt_log,
    events,
    example,
    finished_steps,
    gpujob,
    job_dir,
    log_text,
    metric_steps,
    submit_example,
    wait_until,
)
from tests.test_first_path import wait_state

HF_RUN = ("TENSORBOARD_LOGGING_DIR=$GPUJOB_TB_DIR python train.py --output_dir $GPUJOB_CKPT_DIR --max_steps 30 "
          "--save_steps 100 --logging_steps 2 --step_seconds {sec} ${{GPUJOB_RESUME:+--resume_from_checkpoint \"$GPUJOB_RESUME\"}}")
LIGHTNING_RUN = ("python train.py --ckpt_dir $GPUJOB_CKPT_DIR --log_dir $GPUJOB_TB_DIR --max_steps 30 --every_n_steps 100 "
                 "--step_seconds {sec} ${{GPUJOB_RESUME:+--ckpt_path \"$GPUJOB_RESUME\"}}")
LOOP_RUN = ("python train.py --ckpt_dir $GPUJOB_CKPT_DIR --steps 120 --save_every 50 --step_seconds {sec} "
            "${{GPUJOB_RESUME:+--resume \"$GPUJOB_RESUME\"}}")


def stop_then_resume(host: str, jd: Path, job_id: str) -> dict:
    """Wait for the hook's acknowledgement, stop, check the stop was graceful, resume to the end."""
    wait_until(lambda: (jd / "STOP.watch").exists(), 120, "the Trainer hook to acknowledge the stop file")
    st = gpujob("stop", job_id, "--host", host)
    assert st["state"] == "stopped", st
    a1 = st["attempts"][0]
    assert a1["exit_code"] == 0, attempt_log(jd, 1)[-3000:]  # it ended by itself: no SIGTERM/SIGKILL
    assert not [e for e in events(jd) if e.get("event") in ("killed", "stop_signals")]
    res = gpujob("resume", job_id, "--host", host)
    assert res["job_id"] == job_id
    return wait_state(host, job_id, ("succeeded", "failed"), 180)


def test_hf_trainer_saves_on_stop_and_resume_continues(ssh_host: str, tmp_path: Path) -> None:
    any_host = ssh_host  # over the real sshd; the Lightning and plain-loop ones run on local
    job = example(tmp_path, "hf-trainer", "byo-hf-stop")
    job_id = submit_example(any_host, job, HF_RUN.format(sec=0.3), stop={"grace": "60s"})
    jd = job_dir(tmp_path, any_host, job_id)
    st = stop_then_resume(any_host, jd, job_id)
    assert st["state"] == "succeeded", log_text(jd)[-3000:]
    first = attempt_log(jd, 1)
    [stopped_at] = finished_steps(first)
    assert 0 < stopped_at < 30
    ck = jd / "ckpt" / f"checkpoint-{stopped_at}"  # save_steps 100: only the stop can have written it
    state = json.loads((ck / "trainer_state.json").read_text())
    assert state["global_step"] == stopped_at
    assert st["attempts"][1]["resume"] == str(ck)
    second = attempt_log(jd, 2)
    assert f"resume from {ck}" in second and finished_steps(second) == [30]
    # the second attempt's first logged step follows the checkpoint: it did not start from 0
    resumed = [s for s in metric_steps(jd) if s > 0]
    restart = resumed.index(stopped_at) + 1 if stopped_at in resumed else None
    later = resumed[restart:] if restart is not None else [s for s in resumed if s > stopped_at]
    assert later and min(later) > stopped_at and max(later) == 30


def test_lightning_saves_on_stop_and_resume_continues(tmp_path: Path) -> None:
    job = example(tmp_path, "lightning", "byo-pl-stop")
    job_id = submit_example("local", job, LIGHTNING_RUN.format(sec=0.3), stop={"grace": "60s"})
    jd = job_dir(tmp_path, "local", job_id)
    st = stop_then_resume("local", jd, job_id)
    assert st["state"] == "succeeded", log_text(jd)[-3000:]
    [stopped_at] = finished_steps(attempt_log(jd, 1))
    assert 0 < stopped_at < 30
    saved = jd / "ckpt" / f"epoch=0-step={stopped_at}.ckpt"  # every_n_steps 100: written by the stop
    assert saved.is_file() and (jd / "ckpt" / "last.ckpt").samefile(saved)
    assert st["attempts"][1]["resume"] == str(saved)
    second = attempt_log(jd, 2)
    assert finished_steps(second) == [30]
    import torch

    assert torch.load(saved, map_location="cpu", weights_only=False)["global_step"] == stopped_at


def uninterrupted_weights(tmp_path: Path, steps: int) -> str:
    """The plain loop run straight through, outside gpujob: its final weights' digest."""
    env = dict(QUIET, PATH="/usr/bin:/bin")
    out = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "examples" / "bring-your-own" / "plain-loop" / "train.py"),
                          "--ckpt_dir", str(tmp_path / "straight"), "--steps", str(steps), "--save_every", "50"],
                         capture_output=True, text=True, env=env, timeout=120, check=True).stdout
    return re.findall(r"weights (\w+)", out)[-1]


def test_plain_loop_gets_sigint_saves_and_resumes_exactly(tmp_path: Path) -> None:
    job = example(tmp_path, "plain-loop", "byo-loop-stop")
    job_id = submit_example("local", job, LOOP_RUN.format(sec=0.05), stop={"grace": "60s"})
    jd = job_dir(tmp_path, "local", job_id)
    wait_until(lambda: re.search(r"step \d+ loss", log_text(jd)), 120, "the loop's first loss line")
    st = gpujob("stop", "--host", "local", job_id)
    assert st["state"] == "stopped" and st["attempts"][0]["exit_code"] == 0, log_text(jd)[-3000:]
    first = attempt_log(jd, 1)
    assert not (jd / "STOP.watch").exists()  # it never looked at the stop file
    assert re.search(r"==> gpujob: stop: pid \d+ SIGINT \(grace 60s, then SIGKILL\)", first), first[-2000:]
    stopped_at = int(re.findall(r"interrupted at step (\d+)", first)[-1])
    assert 0 < stopped_at < 120 and (jd / "ckpt" / f"checkpoint_{stopped_at}.pt").is_file()
    assert not [e for e in events(jd) if e.get("event") == "killed"]
    gpujob("resume", job_id, "--host", "local")
    st = wait_state("local", job_id, ("succeeded", "failed"), 180)
    assert st["state"] == "succeeded", log_text(jd)[-3000:]
    second = attempt_log(jd, 2)
    assert f"at step {stopped_at}" in second.split("resumed from", 1)[1].splitlines()[0]
    assert re.findall(r"weights (\w+)", second) == [uninterrupted_weights(tmp_path, 120)]
