"""The three example scripts of examples/bring-your-own, run unchanged through a whole life:

while running, `status --json` shows loss, steps/s and ETA; SIGKILL of the trainer → the restart
resumes at the newest complete checkpoint's step; `gpujob stop` → a checkpoint at the next step
within the grace (HF, Lightning: the Trainer hook; the plain loop: SIGINT and its
KeyboardInterrupt handler), exit 0, state `stopped`; `gpujob resume` continues from it to the
end; `plot` draws; `pull --latest` brings a checkpoint that loads with transformers, Lightning
or torch. The plain loop ends with exactly the weights of an uninterrupted run.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.byo_helpers import (
    BYO,
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
from tests.helpers import needs, wait_state
from tests.remote.run.test_agent import training_pid


@dataclass
class Kind:
    folder: str
    run: str
    max_steps: int
    complete: Callable[[Path], int | None]  # the step of a complete checkpoint, None otherwise
    stop_line: str  # what attempt 2 prints when it stops: "... at step N"
    load: Callable[[Path], int]  # load a pulled checkpoint with its library; returns its step


def torch_step(path: Path, key: str) -> int | None:
    import torch

    try:
        return int(torch.load(path, map_location="cpu", weights_only=False)[key])
    except Exception:  # cut short by the kill: not a checkpoint
        return None


def hf_complete(p: Path) -> int | None:
    import json

    state = p / "trainer_state.json"
    return json.loads(state.read_text())["global_step"] if p.name.startswith("checkpoint-") and state.exists() else None


def hf_load(p: Path) -> int:
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(p)
    assert model.config.n_layer == 2
    return hf_complete(p) or -1


def lightning_load(p: Path) -> int:
    spec = importlib.util.spec_from_file_location("byo_lightning_train", BYO / "lightning" / "train.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.Regression.load_from_checkpoint(p, map_location="cpu")
    assert model.net[0].in_features == 8
    return torch_step(p, "global_step")


def loop_load(p: Path) -> int:
    import torch

    state = torch.load(p, map_location="cpu")  # weights_only: the plain loop saves tensors and ints only
    assert set(state) == {"model", "opt", "step"}
    return state["step"]


def pace(seconds: float) -> str:
    """A step's pretend length: ``seconds`` while the test watches, kills and stops the run
    (attempts 1 and 2); attempt 3 only has to reach the end, so its steps are quick. Attempt 2 must
    outlast the test's reads of its figures (a CLI call each, seconds apiece on a loaded machine):
    it is stopped as soon as they are seen, so a slower pace costs the test little."""
    return f'$([ "$GPUJOB_ATTEMPT" -ge 3 ] && echo 0.01 || echo {seconds})'


KINDS = {
    "hf": Kind("hf-trainer", "TENSORBOARD_LOGGING_DIR=$GPUJOB_TB_DIR python train.py --output_dir $GPUJOB_CKPT_DIR "
               f"--max_steps 80 --save_steps 5 --logging_steps 2 --step_seconds {pace(0.4)} "
               "${GPUJOB_RESUME:+--resume_from_checkpoint \"$GPUJOB_RESUME\"}", 80, hf_complete,
               r"finished at step (\d+)", hf_load),
    "lightning": Kind("lightning", "python train.py --ckpt_dir $GPUJOB_CKPT_DIR --log_dir $GPUJOB_TB_DIR --max_steps 80 "
                      f"--every_n_steps 5 --step_seconds {pace(0.4)} ${{GPUJOB_RESUME:+--ckpt_path \"$GPUJOB_RESUME\"}}", 80,
                      lambda p: torch_step(p, "global_step") if p.suffix == ".ckpt" else None,
                      r"finished at step (\d+)", lightning_load),
    # the job file's own way: checkpoint: {dir: checkpoints, pattern: ...}, the script's default folder
    "loop": Kind("plain-loop", f"python train.py --steps 300 --save_every 10 --step_seconds {pace(0.2)} "
                 "${GPUJOB_RESUME:+--resume \"$GPUJOB_RESUME\"}", 300,
                 lambda p: torch_step(p, "step") if p.suffix == ".pt" else None,
                 r"interrupted at step (\d+)", loop_load),
}


def complete_steps(ckpt: Path, kind: Kind) -> dict[int, Path]:
    out: dict[int, Path] = {}
    for p in sorted(ckpt.iterdir()) if ckpt.is_dir() else []:
        step = kind.complete(p)
        if step is not None:
            out.setdefault(step, p)
    return out


def live_figures(host: str, job_id: str) -> dict:
    st = gpujob("status", job_id, "--host", host)
    m = st.get("latest_metrics") or {}
    return {"loss": m.get(st.get("loss_key") or "loss"), "steps_per_s": st.get("steps_per_s"),
            "eta_s": st.get("eta_s"), "state": st["state"], "source": st.get("metrics_source")}


def uninterrupted_weights(tmp_path: Path, steps: int) -> str:
    # the job's thread count too: torch's float sums may differ between 1 and 2 threads
    env = dict(QUIET, PATH=os.environ["PATH"], **{k: v for k, v in os.environ.items() if k == "OMP_NUM_THREADS"})
    out = subprocess.run([sys.executable, str(BYO / "plain-loop" / "train.py"), "--ckpt_dir", str(tmp_path / "straight"),
                          "--steps", str(steps), "--save_every", "10"],
                         capture_output=True, text=True, env=env, timeout=120, check=True).stdout
    return re.findall(r"weights (\w+)", out)[-1]


def life(host: str, tmp_path: Path, name: str) -> tuple[Kind, Path, dict]:
    kind = KINDS[name]
    job = example(tmp_path, kind.folder, f"byo-{name}-life")
    job_id = submit_example(host, job, kind.run, retry={"max_restarts": 1, "backoff": "2s"}, stop={"grace": "60s"})
    jd = job_dir(tmp_path, host, job_id)
    ckpt = jd / "ckpt"

    # SIGKILL once two checkpoints are complete: the restart resumes from the newest complete one
    wait_until(lambda: len(complete_steps(ckpt, kind)) >= 2, 120, "two complete checkpoints")
    pid = training_pid(job_id, b"train.py")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat").read_bytes().split(b")")[-1][:3],
               30, "the trainer to die")
    newest = max(complete_steps(ckpt, kind))  # the files cannot change until the restart (backoff 2s)
    wait_until(lambda: len(gpujob("status", job_id, "--host", host).get("attempts") or []) >= 2, 60, "the restart")
    st = gpujob("status", job_id, "--host", host)
    a1, a2 = st["attempts"][:2]
    assert a1["exit_code"] in (-9, 137) and a1["reason"] == "signal", a1
    assert a2["resume"] and kind.complete(Path(a2["resume"])) == newest, (a2, newest)

    # attempt 2 running: loss, steps/s and ETA in status without a line of gpujob code
    figures: dict = {}

    def shown() -> bool:
        figures.update(live_figures(host, job_id))
        return all(isinstance(figures[k], (int, float)) and figures[k] > 0 for k in ("loss", "steps_per_s", "eta_s"))

    wait_until(shown, 120, lambda: f"loss, steps/s and ETA in status (last seen: {figures})")

    # stop in attempt 2: a checkpoint at the next step, exit 0 within the grace, `stopped`
    if name == "loop":
        wait_until(lambda: re.search(r"step \d+ loss", attempt_log(jd, 2)), 120, "attempt 2's first loss line")
    else:
        wait_until(lambda: (jd / "STOP.watch").exists(), 120, "the Trainer hook's acknowledgement")
    st = gpujob("stop", job_id, "--host", host)
    a2 = st["attempts"][1]
    assert st["state"] == "stopped" and a2["exit_code"] == 0, attempt_log(jd, 2)[-3000:]
    assert not [e for e in events(jd) if e.get("event") == "killed"]
    second = attempt_log(jd, 2)
    if name == "loop":  # it never acknowledged the stop file: one SIGINT (KeyboardInterrupt), no SIGKILL
        assert not (jd / "STOP.watch").exists()
        assert re.search(r"==> gpujob: stop: pid \d+ SIGINT \(grace 60s, then SIGKILL\)", second), second[-2000:]
    stopped_at = int(re.findall(kind.stop_line, second)[-1])
    assert newest < stopped_at < kind.max_steps
    assert stopped_at in complete_steps(ckpt, kind)

    # resume: the step count goes on from the stop's checkpoint
    gpujob("resume", job_id, "--host", host)
    st = wait_state(host, job_id, ("succeeded", "failed"), 240, root=jd.parent.parent)
    assert st["state"] == "succeeded", log_text(jd)[-3000:]
    a3 = st["attempts"][2]
    assert kind.complete(Path(a3["resume"])) == stopped_at
    if name != "loop":
        assert finished_steps(attempt_log(jd, 3)) == [kind.max_steps]
        since = [s for s in metric_steps(jd, since=float(a3["started_at"]))]
        assert since and min(since) > stopped_at  # not from 0
    assert st.get("reason") in (None, "") and st.get("exit_code") == 0  # no stale failure fields

    # plot draws the curves; pull --latest brings the newest complete checkpoint, and it loads
    png = tmp_path / f"{name}.png"
    drawn = gpujob("plot", job_id, "--host", host, "-o", str(png))
    assert "loss" in drawn["keys"] and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pulled = gpujob("pull", job_id, str(tmp_path / "pulled"), "--host", host, "--latest")
    got = Path(pulled["dest"]) / pulled["selected"]
    assert kind.load(got) == kind.max_steps
    return kind, jd, figures


@pytest.mark.slow
def test_hf_trainer_life_over_ssh(ssh_host: str, tmp_path: Path) -> None:
    needs("torch", "transformers", "matplotlib")
    life(ssh_host, tmp_path, "hf")


@pytest.mark.slow
def test_lightning_life(tmp_path: Path) -> None:
    needs("torch", "lightning", "tensorboard", "matplotlib")
    life("local", tmp_path, "lightning")


@pytest.mark.slow
def test_plain_loop_life_ends_with_uninterrupted_weights(tmp_path: Path) -> None:
    needs("torch", "tqdm", "matplotlib")
    _, jd, figures = life("local", tmp_path, "loop")  # the HF life runs over the real sshd
    assert figures["source"] in ("log", "tensorboard")  # it writes no metrics file
    third = attempt_log(jd, 3)
    assert re.findall(r"weights (\w+)", third) == [uninterrupted_weights(tmp_path, 300)]


def test_plain_loop_output_parses_to_loss_and_steps(tmp_path: Path) -> None:
    """The loop's real output (tqdm redraws on stderr, `step N loss x` prints on stdout, both in
    one log, a print often landing right after a bar) gives records with step and loss."""
    needs("torch", "tqdm")
    from remote.metrics.logparse import LogParser

    out = subprocess.run(f"{sys.executable} {BYO / 'plain-loop' / 'train.py'} --ckpt_dir {tmp_path} --steps 40 "
                         f"--save_every 100 2>&1", shell=True, capture_output=True, env=dict(QUIET, PATH=os.environ["PATH"]),
                         timeout=120, check=True).stdout
    recs = LogParser().feed(out, 1.0)
    losses = {r["step"]: r["loss"] for r in recs if "loss" in r}
    printed = {int(s): float(v) for s, v in re.findall(rb"step (\d+) loss ([\d.]+)", out)}
    assert losses == printed and sorted(printed) == [5, 10, 15, 20, 25, 30, 35, 40]
    assert any(r.get("max_steps") == 40 for r in recs)  # the bar's total: an ETA
