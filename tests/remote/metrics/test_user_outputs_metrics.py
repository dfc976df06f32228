"""What scripts that never import gpujob print, as status, plot and --json show it: a training and a
validation loss on one line stay two metrics, and a loop that counts only epochs gets epoch progress."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remote.metrics.logparse import LogParser
from tests.conftest import run_cli
from tests.helpers import needs, status, submit, wait_for, wait_state, write_job


def feed(text: str) -> list[dict]:
    p = LogParser()
    return p.feed(text.encode(), 1.0)


def test_train_and_val_loss_on_one_line_stay_apart() -> None:
    # nanoGPT's eval line; without the qualifier both were "loss" and the validation value won
    recs = feed("step 200: train loss 2.1000, val loss 2.2000\n")
    assert recs == [{"train_loss": 2.1, "val_loss": 2.2, "step": 200, "t": 1.0}]
    recs = feed("Epoch 3/10 - train loss: 0.4000 - valid loss: 0.5000\n")
    assert recs[0]["train_loss"] == 0.4 and recs[0]["valid_loss"] == 0.5 and "loss" not in recs[0]
    # a plain "loss" stays "loss"; a name that already says it (val_loss=) is kept as printed
    assert feed("iter 100: loss 2.3456, time 12.34ms\n") == [{"loss": 2.3456, "step": 100, "t": 1.0}]
    assert feed("step 5 loss=0.5 val_loss=0.6\n") == [{"loss": 0.5, "val_loss": 0.6, "step": 5, "t": 1.0}]


def test_json_lines_printed_by_the_script() -> None:
    recs = feed('{"global_step": 10, "loss": 0.53, "lr": 3e-4, "run": "a"}\n{"val_loss": "0.6", "ok": true}\n')
    assert recs == [{"step": 10, "loss": 0.53, "lr": 3e-4, "t": 1.0}, {"val_loss": 0.6, "step": 10, "t": 1.0}]


def test_epoch_loops_count_epochs_when_nothing_else_counts() -> None:
    # Keras prints the epoch on a line of its own, the metrics at the epoch's end
    recs = feed("Epoch 3/10\n100/100 [==============================] - 2s 20ms/step - loss: 0.5300 - val_loss: 0.6\n")
    assert recs == [{"loss": 0.53, "val_loss": 0.6, "epoch": 3, "step": 3, "max_steps": 10, "t": 1.0}]
    recs = feed("2026-11-30 12:00:00,123 INFO epoch 4 of 12: loss=0.25\n")
    assert recs[0]["epoch"] == 4 and recs[0]["step"] == 4 and recs[0]["max_steps"] == 12
    # where the log counts steps (a bar, "step N"), the epoch is recorded but the step stays the bar's
    p = LogParser()
    p.feed(b"\r 50%|#####     | 5/10 [00:01<00:01,  5.00it/s]\r", 1.0)
    recs = p.feed(b"\nEpoch 2/3 loss 0.5\n", 2.0)
    assert recs[-1] == {"loss": 0.5, "epoch": 2, "step": 5, "t": 2.0}


def test_a_step_count_that_starts_again_each_epoch_is_counted_on() -> None:
    # PyTorch's tutorial loop: the step is the batch within the epoch
    text = "".join(f"Epoch [{e}/3], Step [{b}/50], Loss: {b / 100:.4f}\n" for e in (1, 2, 3) for b in (25, 50))
    recs = feed(text)
    assert [(r["step"], r.get("max_steps")) for r in recs] == [(25, 50), (50, 50), (75, 150), (100, 150), (125, 150),
                                                               (150, 150)]
    # "batch N/M" is within the epoch from the start; with no epoch total there is no total, not M
    text = "".join(f"epoch {e} | batch {b}/40 | loss 0.5\n" for e in (0, 1) for b in (20, 40))
    assert [(r["step"], r.get("max_steps")) for r in feed(text)] == [(20, None), (40, None), (60, None), (80, None)]
    # a step that goes on across epochs is left as printed
    text = "".join(f"epoch {e} step {e * 100 + b}/300 loss 0.5\n" for e in (0, 1) for b in (50, 100))
    assert [(r["step"], r["max_steps"]) for r in feed(text)] == [(50, 300), (100, 300), (150, 300), (200, 300)]


def test_an_outer_epochs_bar_gives_the_inner_bar_its_total() -> None:
    needs("tqdm")
    import io

    from tqdm import tqdm, trange

    buf = io.StringIO()  # what tqdm writes to stderr, redraws and cursor moves included
    for _ in trange(3, desc="Epochs", file=buf, mininterval=0):
        for _ in tqdm(range(20), leave=False, file=buf, mininterval=0):
            pass
    data = buf.getvalue().encode()
    p = LogParser()
    recs = [r for i in range(0, len(data), 400) for r in p.feed(data[i:i + 400], float(i))]
    assert recs[0]["max_steps"] == 60 and recs[-1]["step"] == 60  # 3 epochs × 20 batches from the first one
    assert [r["step"] for r in recs] == sorted(r["step"] for r in recs)
    # a bar described "Epoch" alone: its percentage is no epoch number
    p = LogParser()
    assert p.feed(b"\rEpoch:  30%|###   | 3/10 [00:03<00:07,  1.00it/s, loss=0.5]\r", 1.0) == [
        {"t": 1.0, "step": 3, "max_steps": 10, "loss": 0.5}]


EPOCH_LOOP = """
    import argparse, logging, os, time
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int)
    EPOCHS = ap.parse_args().epochs
    for ep in range(1, EPOCHS + 1):
        time.sleep(0.7)
        print(f"Epoch {ep}: train loss: {1 / ep:.4f} - val loss: {2 / ep:.4f}", flush=True)  # the total only in run:
        logging.info("epoch=%d lr=%g", ep, 0.1 / ep)
        end = time.time() + 120  # from epoch 3 on, it holds until the test has read the status (or 120 s):
        while ep >= 3 and not os.path.exists(SEEN) and time.time() < end:  # a loaded machine's status call
            time.sleep(0.05)  # may take longer than the run would
"""


def test_an_epoch_loop_shows_epochs_eta_and_its_own_losses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the agent reads each epoch's lines apart (every 0.2 s, not 2 s): the rate behind the ETA spans
    # the epochs it holds at, not one read's batch
    monkeypatch.setenv("GPUJOB_METRICS_EVERY", "0.2")
    seen_file = tmp_path / "seen"
    job_id = submit("local", write_job(tmp_path, "epochs", f"    SEEN = {str(seen_file)!r}\n" + EPOCH_LOOP,
                                       "python main.py --epochs 10"))["job_id"]
    seen: dict = {}

    def running_with_eta() -> bool:
        seen.update(status("local", job_id))
        assert seen["state"] in ("queued", "running", "succeeded"), seen
        return seen["state"] == "running" and seen.get("eta_s") is not None

    wait_for(running_with_eta, 60, lambda: json.dumps(seen)[:1500])
    assert seen["max_steps"] == 10 and 0 < seen["eta_s"] < 10  # epochs left / epochs a second, not steps
    m = seen["latest_metrics"]
    assert seen["loss_key"] == "train_loss" and m["train_loss"] == round(1 / m["epoch"], 4)
    assert seen["eval_metrics"]["val_loss"] == round(2 / m["epoch"], 4)
    text = run_cli("status", job_id, "--host", "local", env_extra={"COLUMNS": "160"}).stdout
    # status reads the log's newest lines at each call: this second read may be an epoch (0.7 s) on
    assert any(f"epoch {e}/10" in text for e in (m["epoch"], m["epoch"] + 1)), text
    assert "epochs/s" in text and "train_loss" in text
    seen_file.write_text("seen")  # the loop goes on

    done = wait_state("local", job_id, ("succeeded", "failed"))
    assert done["state"] == "succeeded" and done["latest_metrics"]["train_loss"] == 0.1
    # ls: the last record is the logging line (epoch=10 lr=...), the loss was on the line before
    row = next(line.split() for line in run_cli("ls", env_extra={"COLUMNS": "200"}).stdout.splitlines()
               if line.startswith(job_id))
    assert row[5:7] == ["10", "0.1"], row  # STEP, LOSS (train_loss)
    r = run_cli("plot", job_id, "--host", "local", "-o", str(tmp_path / "p.png"), "--json")
    assert r.returncode == 0, r.stderr
    points = json.loads(r.stdout)["points"]
    assert points["train_loss"] == 10 and points["val_loss"] == 10 and points["lr"] == 10
