"""Public training scripts' shapes run unchanged through the real CLI on ``local``: what a user met
that was gpujob's, each on a small script of that shape (no torch: a second each)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from tests.byo_helpers import job_dir, log_text
from tests.conftest import run_cli
from tests.e2e.test_scripts_recipes import recipe
from tests.helpers import status, submit, wait_for, wait_state, write_job


def run_to_end(tmp_path: Path, job: Path) -> tuple[str, Path]:
    """Submit ``job`` on local and wait until it succeeded: (job id, job folder)."""
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    st = wait_state("local", job_id, ("succeeded", "failed"), 60, root=jd.parent.parent)
    assert st["state"] == "succeeded", log_text(jd)[-2000:]
    return job_id, jd


# in the shape of accelerate's examples (complete_nlp_example.py): an epoch loop printing its epoch
# index and overall step, accelerator.save_state(f"{output_dir}/step_{n}") every --checkpointing_steps
ACCELERATE_LOOP = """
    import argparse, os, pickle
    p = argparse.ArgumentParser()
    p.add_argument("--output_dir", default=".")
    p.add_argument("--checkpointing_steps", type=int, default=25)
    p.add_argument("--num_epochs", type=int, default=3)
    a = p.parse_args()
    overall_step = 0
    for epoch in range(a.num_epochs):
        for step in range(40):
            overall_step += 1
            if overall_step % 10 == 0:
                print(f"epoch {epoch} step {overall_step} loss {1.0 / overall_step:.4f}", flush=True)
            if overall_step % a.checkpointing_steps == 0:
                d = os.path.join(a.output_dir, f"step_{overall_step}")
                os.makedirs(d)
                with open(os.path.join(d, "model.safetensors"), "wb") as f:
                    f.write(b"weights %d" % overall_step)
                with open(os.path.join(d, "random_states_0.pkl"), "wb") as f:
                    pickle.dump({"step": overall_step}, f)
"""


def test_accelerate_loop_total_and_pull_dest_after_options(tmp_path: Path) -> None:
    job = recipe(tmp_path, "accelerate", {"train.py": ACCELERATE_LOOP})  # docs/bring-your-own.md's job file
    job.write_text(job.read_text().replace("--checkpointing_steps 1000", "--checkpointing_steps 25"))
    job_id, jd = run_to_end(tmp_path, job)
    st = status("local", job_id)
    # 4 epochs of 40 steps, the total estimated from the epoch indexes while it ran (167, where the first
    # epoch change alone said 180); it went to its end: its last step is the total
    assert st["latest_metrics"]["step"] == 160 and st["max_steps"] == 160, (st["latest_metrics"], st["max_steps"])
    # step_N is named by its step (accelerate's automatic checkpoint_<n> counts saves): the panel says "step"
    r = run_cli("status", job_id, "--host", "local")
    assert "newest step_150 (accelerate, step 150)" in r.stdout, r.stdout
    # DEST after the options, as users write it (argparse refused it: "unrecognized arguments")
    dest = tmp_path / "pulled"
    r = run_cli("pull", job_id, "--host", "local", "--latest", str(dest))
    assert r.returncode == 0, r.stderr + r.stdout
    got = dest / job_id / "ckpt" / "step_150" / "random_states_0.pkl"
    assert pickle.loads(got.read_bytes()) == {"step": 150}, sorted(p.name for p in dest.rglob("*"))
    r = run_cli("pull", job_id, "--host", "local", "--latest", str(dest), "extra")
    assert r.returncode == 2 and "unrecognized arguments:" in r.stderr and "extra" in r.stderr and "Traceback" not in r.stderr, r.stderr


# the image trainer's log as it prints it: the update's 0-based index, then the share done after it;
# the first attempt dies after epoch 1, the second resumes at epoch 2 (its first line: "Train: 2 [...]")
TIMM_LOG = """
    import os, sys
    start = 0 if os.environ["GPUJOB_ATTEMPT"] == "1" else 2
    for epoch in range(start, int(sys.argv[1])):
        for i in (0, 5, 10, 15, 19):
            print(f"Train: {epoch} [{i:>4d}/20 ({100. * (i + 1) / 20:>3.0f}%)]  Loss: 1.31 (1.31)  Time: 0.030s, "
                  f"266.67/s  (0.031s, 258.06/s)  LR: 1.000e-01  Data: 0.001 (0.001)", flush=True)
        print("Test: [   0/5]  Time: 0.010 (0.010)  Loss:   1.302 (  1.302)  Acc@1:  41.875 ( 41.875)", flush=True)
        if epoch == 1 and start == 0:
            sys.exit(1)
"""


def test_image_trainer_ends_at_its_total(tmp_path: Path) -> None:
    job = write_job(tmp_path, "timm", TIMM_LOG, "python main.py 3 --epochs 3", retry={"max_restarts": 1, "backoff": "0s"})
    job_id, jd = run_to_end(tmp_path, job)
    rows = [json.loads(x) for x in (jd / "metrics.log.jsonl").read_text().splitlines()]
    train = [r for r in rows if "epoch" in r]
    # epochs count from 0 (the first attempt's first line said so), also in the resumed attempt: its
    # "Train: 2" is the third epoch (it had read as the second: steps 20 short, 40/60 at the end)
    assert [r["step"] for r in train][:2] == [1, 6] and train[-1]["step"] == train[-1]["max_steps"] == 60, \
        train[-3:]  # the last line, [19/20 (100%)], read 59 of 60
    assert [r["step"] for r in train if r["epoch"] == 2][0] == 41, train
    assert status("local", job_id)["latest_metrics"]["step"] == 60


# an HF Trainer resumed at step 140: its tqdm bar jumps there at once (update(140)), and tqdm then
# draws the jump's rate for many redraws, the elapsed time going on (752 it/s over 3 s fell within ten
# times the bar's whole count, 260: it read as the speed, and the ETA as 0 s)
RESUMED_BAR = """
    import sys, time
    t0 = time.time()
    for n in range(140, 400, 4):
        sys.stderr.write("\\r %2d%%|#| %d/400 [00:%02d<00:00, 752.09it/s]" % (n // 4, n, time.time() - t0))
        sys.stderr.flush()
        time.sleep(0.1)
"""


def test_a_resumed_bars_jump_is_no_speed(tmp_path: Path) -> None:
    job = write_job(tmp_path, "hfbar", RESUMED_BAR, "python main.py")
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    wait_for(lambda: "[00:03<" in log_text(jd), 30, lambda: log_text(jd)[-500:])
    st = status("local", job_id)
    assert st["state"] == "running", st["state"]
    # about 40 steps a second: neither the bar's 16899 nor an ETA of 0 s with half the steps to go
    assert st["steps_per_s"] is None or st["steps_per_s"] < 100, st["steps_per_s"]
    assert st["eta_s"] is None or st["eta_s"] > 1, st["eta_s"]
    wait_state("local", job_id, ("succeeded", "failed"), 30, root=jd.parent.parent)


# the image trainer's CheckpointSaver keeps its own --checkpoint-hist newest files and deletes the
# older ones itself (logging an exception when one is already gone)
SELF_ROTATING = """
    import os
    out = os.path.join(os.environ["GPUJOB_CKPT_DIR"], "exp1")
    os.makedirs(out)
    hist = []
    for epoch in range(6):
        with open(os.path.join(out, "checkpoint-%d.pth.tar" % epoch), "wb") as f:
            f.write(b"PK\\x05\\x06" + bytes(18))  # an empty zip: complete
        hist.append(epoch)
        if len(hist) > 4:
            try:
                os.remove(os.path.join(out, "checkpoint-%d.pth.tar" % hist.pop(0)))
            except Exception as e:
                print("Exception '%s' while deleting checkpoint" % e, flush=True)
        print("Train: %d [  19/20 (100%%)]  Loss: 0.5 (0.5)" % epoch, flush=True)
        import time; time.sleep(0.3)
"""


def test_keep_zero_leaves_rotation_to_the_script(tmp_path: Path) -> None:
    job = write_job(tmp_path, "selfrot", SELF_ROTATING, "python main.py", checkpoint={"keep": 0})
    job_id, jd = run_to_end(tmp_path, job)
    left = sorted(p.name for p in (jd / "ckpt" / "exp1").iterdir())
    assert left == [f"checkpoint-{n}.pth.tar" for n in (2, 3, 4, 5)], left  # the script's 4, not gpujob's 3
    assert "while deleting checkpoint" not in log_text(jd)


# a loop that overwrites its one checkpoint in place and never looks at the stop file (a GPT trainer's
# torch.save(ckpt, out_dir/ckpt.pt)): its save takes a while, and a stop comes in the middle of it
SLOW_SAVE = """
    import os, time, zipfile
    with zipfile.ZipFile(os.path.join(os.environ["GPUJOB_CKPT_DIR"], "ckpt.pt"), "w") as z:
        with z.open("state", "w") as f:
            print("saving checkpoint", flush=True)
            for i in range(30 if os.environ["GPUJOB_ATTEMPT"] == "1" else 5):
                f.write(b"x" * 1000)
                time.sleep(0.1)
    while True:
        time.sleep(0.1)
"""


@pytest.mark.slow
def test_a_stop_waits_for_the_checkpoint_being_written(tmp_path: Path) -> None:
    """The stop signal (SIGINT: KeyboardInterrupt) in the middle of the save had cut the checkpoint short,
    the only one there was: ``resume`` began again from nothing."""
    import zipfile

    # no kept copy (checkpoint.backup): the cut file below is the only one, so resume must say why it starts over
    job = write_job(tmp_path, "slowsave", SLOW_SAVE, "python main.py", checkpoint={"backup": False})
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    wait_for(lambda: "saving checkpoint" in log_text(jd), 60, lambda: log_text(jd)[-2000:])
    r = run_cli("stop", job_id, "--host", "local")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "stop: waiting for ckpt.pt to be written first" in log_text(jd), log_text(jd)[-2000:]
    ckpt = jd / "ckpt" / "ckpt.pt"
    with zipfile.ZipFile(ckpt) as z:
        assert len(z.read("state")) == 30000
    assert status("local", job_id)["state"] == "stopped"
    # resume says what GPUJOB_RESUME names, and when nothing is complete, why (it had said only "resumed")
    r = run_cli("resume", job_id, "--host", "local", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["resume_from"] == "ckpt.pt", r.stdout + r.stderr
    assert run_cli("stop", job_id, "--host", "local").returncode == 0
    ckpt.write_bytes(ckpt.read_bytes()[:20])
    r = run_cli("resume", job_id, "--host", "local")
    assert r.returncode == 0 and "no complete checkpoint to resume from (ckpt.pt: cut short" in r.stdout, r.stdout
    assert run_cli("stop", job_id, "--host", "local").returncode == 0
