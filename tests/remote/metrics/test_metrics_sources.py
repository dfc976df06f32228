"""Metrics for scripts that never call gpujob: TensorBoard event files and the log.

The event reader runs on files written by torch's ``SummaryWriter`` (``simple_value``) and by the
``tensorboard`` package's own writer (tensor form); the log parser on output captured from real
runs (tests/remote/metrics/data/logs, made by tests/remote/metrics/data/scripts/*.py: ``python3 SCRIPT > X.log 2>&1``, with
``lightning_tiny.py --bar rich`` for the rich bar) and on live jobs.
"""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from pathlib import Path

import pytest

from remote.metrics import tfevents
from remote.metrics.logparse import LogParser
from tests.conftest import REPO, run_cli
from tests.helpers import needs, submit, wait_for, wait_state

FIXTURES = REPO / "tests" / "remote" / "metrics" / "data" / "logs"
SCRIPTS = REPO / "tests" / "remote" / "metrics" / "data" / "scripts"


# ---- TensorBoard event files ------------------------------------------------------------------
def test_crc32c_is_castagnoli_not_zlib() -> None:
    assert tfevents.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert tfevents.crc32c(b"123456789") != zlib.crc32(b"123456789")
    assert tfevents.crc32c(b"") == 0


def _summary_writer_file(d: Path, n: int = 6) -> Path:
    import numpy as np
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(d))
    for i in range(n):
        w.add_scalar("train/loss", 1.0 / (i + 1), i)
        w.add_scalar("train/learning_rate", 1e-3 * (n - i), i)
    w.add_histogram("weights", np.arange(10), 0)  # not a scalar: skipped
    w.add_text("note", "hello", 0)
    w.close()
    (f,) = d.glob("events.out.tfevents.*")
    return f


def test_reads_summary_writer_scalars_and_skips_the_rest(tmp_path: Path) -> None:
    needs("torch", "tensorboard")
    f = _summary_writer_file(tmp_path)
    got = tfevents.scalars(str(f))
    assert set(got) == {"train/loss", "train/learning_rate"}
    assert [s for s, _ in got["train/loss"]] == list(range(6))
    for (_, v), want in zip(got["train/loss"], [1.0 / (i + 1) for i in range(6)]):
        assert v == struct.unpack("<f", struct.pack("<f", want))[0]  # float32 exactly


def test_reads_the_tensorboard_packages_tensor_form(tmp_path: Path) -> None:
    needs("tensorboard")
    import numpy as np
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary import Writer
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    w = Writer(str(tmp_path / "a"))  # float32 tensors in float_val
    for i in range(4):
        w.add_scalar("loss", 2.5 + i, i)
    w.close()
    (fa,) = (tmp_path / "a").glob("events.out.tfevents.*")
    assert tfevents.scalars(str(fa)) == {"loss": [(0, 2.5), (1, 3.5), (2, 4.5), (3, 5.5)]}

    # other encodings TF2 writers use: double_val, tensor_content (packed bytes), int64; a histogram-shaped tensor
    ew = EventFileWriter(str(tmp_path / "b"))
    meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    content = tensor_util.make_tensor_proto(np.float64(0.125))
    content.ClearField("double_val")
    content.tensor_content = struct.pack("<d", 0.125)
    values = [("acc", tensor_util.make_tensor_proto(np.float64(0.75))), ("ppl", content),
              ("tokens", tensor_util.make_tensor_proto(np.int64(-7))),
              ("hist", tensor_util.make_tensor_proto(np.zeros((3, 3), np.float32)))]
    for tag, t in values:
        ev = event_pb2.Event(wall_time=1234.5, step=9,
                             summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, tensor=t, metadata=meta)]))
        ew.add_event(ev)
    ew.close()
    (fb,) = (tmp_path / "b").glob("events.out.tfevents.*")
    assert tfevents.scalars(str(fb)) == {"acc": [(9, 0.75)], "ppl": [(9, 0.125)], "tokens": [(9, -7.0)]}


def test_torn_tail_waits_and_corrupt_frames_are_not_misparsed(tmp_path: Path) -> None:
    needs("torch", "tensorboard")
    full = _summary_writer_file(tmp_path / "w").read_bytes()
    frames, pos = [], 0
    while pos < len(full):
        (n,) = struct.unpack("<Q", full[pos:pos + 8])
        frames.append(full[pos:pos + 16 + n])
        pos += 16 + n
    want = tfevents.scalars(str(next((tmp_path / "w").glob("events*"))))

    # every cut inside the last frame: nothing of it is read, then it is read once when complete
    last = frames[-1]
    head = b"".join(frames[:-1])
    for cut in (1, 8, 12, len(last) - 4, len(last) - 1):
        f = tmp_path / f"torn{cut}"
        f.write_bytes(head + last[:cut])
        st = tfevents.FileState()
        first = tfevents.read_new(str(f), st)
        assert st.offset == len(head) and not st.corrupt and st.bad_records == 0
        with open(f, "ab") as fh:
            fh.write(last[cut:])
        second = tfevents.read_new(str(f), st)
        assert len(second) == 1 and st.offset == len(full)
        got: dict = {}
        for _, step, vals in first + second:
            for tag, v in vals:
                got.setdefault(tag, []).append((step, v))
        assert got == want

    # a data CRC that does not match: that frame is skipped, the others are read
    k = 3
    bad = bytearray(frames[k])
    bad[-5] ^= 0xFF  # a byte of the data
    f = tmp_path / "badcrc"
    f.write_bytes(b"".join(frames[:k]) + bytes(bad) + b"".join(frames[k + 1:]))
    st = tfevents.FileState()
    evs = tfevents.read_new(str(f), st)
    assert st.bad_records == 1 and len(evs) == len(frames) - 1 and st.offset == len(full)

    # a length whose CRC fails: nothing after it can be framed, nothing is guessed
    bad = bytearray(frames[k])
    bad[9] ^= 0x01
    f.write_bytes(b"".join(frames[:k]) + bytes(bad) + b"".join(frames[k + 1:]))
    st = tfevents.FileState()
    evs = tfevents.read_new(str(f), st)
    assert st.corrupt and len(evs) == k and tfevents.read_new(str(f), st) == []


def test_incremental_reads_follow_a_live_writer(tmp_path: Path) -> None:
    needs("torch", "tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path))
    st = tfevents.FileState()
    seen = []
    path = None
    for i in range(5):
        w.add_scalar("loss", float(i), i)
        w.flush()
        path = path or str(next(tmp_path.glob("events*")))
        seen += [(s, v) for _, s, vals in tfevents.read_new(path, st) for _, v in vals]
    w.close()
    seen += [(s, v) for _, s, vals in tfevents.read_new(path, st) for _, v in vals]
    assert seen == [(i, float(i)) for i in range(5)]


# ---- the log ----------------------------------------------------------------------------------
def parse(name: str, chunk: int = 97) -> tuple[list[dict], LogParser]:
    """Feed a captured log in small pieces (as the collector reads a growing file)."""
    data = (FIXTURES / name).read_bytes()
    p = LogParser()
    recs: list[dict] = []
    for i in range(0, len(data), chunk):
        recs += p.feed(data[i:i + chunk], float(i))
    return recs, p


def test_hf_trainer_dict_lines_and_bar() -> None:
    recs, p = parse("hf_trainer.log")
    losses = [r for r in recs if "loss" in r]
    # transformers 5 prints strings: '4.557' → 4.557; the step is the bar's count when printed
    assert [(r["step"], r["loss"]) for r in losses] == [(1, 4.557), (4, 4.586), (6, 4.554), (8, 4.536), (10, 4.57),
                                                        (12, 4.55)]
    assert losses[0]["grad_norm"] == 2.447 and losses[0]["learning_rate"] == 4.583e-05
    evals = [r for r in recs if "eval_loss" in r]
    assert [(r["step"], r["eval_loss"]) for r in evals] == [(6, 4.544), (12, 4.541)]
    final = [r for r in recs if "train_runtime" in r]
    assert final and final[0]["train_loss"] == 4.559
    # the evaluation bar (2/2, no description) never counts as training progress
    assert all(r.get("max_steps") == 12 for r in recs if "max_steps" in r)
    assert p.progress["step"] == 12 and p.progress["total"] == 12 and p.progress["rate"] == pytest.approx(6.01)


def test_hf_4x_float_dicts() -> None:
    p = LogParser()
    recs = p.feed(b"{'loss': 4.0312, 'grad_norm': 0.865, 'learning_rate': 4.999e-05, 'epoch': 0.0002}\n", 1.0)
    assert recs == [{"loss": 4.0312, "grad_norm": 0.865, "learning_rate": 4.999e-05, "epoch": 0.0002, "t": 1.0}]


def test_lightning_tqdm_bar_postfix_and_epochs() -> None:
    recs, p = parse("lightning_tqdm.log")
    steps = [r["step"] for r in recs]
    assert steps == sorted(steps) and steps[-1] == 16  # 2 epochs × 8 batches, never back to 0
    assert recs[-1]["train_loss"] == 0.0172 and recs[-1]["val_loss"] == 0.0102
    assert all("v_num" not in r for r in recs)
    assert p.progress["total"] is None  # the bar does not say how many epochs: no invented ETA
    p2 = LogParser(epochs=2)  # with the count from the job (--max_epochs 2 in run:)
    for line in (FIXTURES / "lightning_tqdm.log").read_bytes().splitlines(keepends=True):
        p2.feed(line, 0.0)
    assert p2.progress["total"] == 16 and p2.progress["step"] == 16


def test_lightning_rich_bar() -> None:
    recs, p = parse("lightning_rich.log")
    assert p.progress["step"] == 16 and p.progress["total"] == 16  # "Epoch 1/1": index of the last epoch
    merged: dict = {}
    for r in recs:
        merged.update(r)
    assert merged["train_loss"] == 0.017 and merged["val_loss"] == 0.01


def test_tqdm_loop_with_prints_after_the_bar() -> None:
    recs, p = parse("tqdm_loop.log")
    printed = [r for r in recs if "max_steps" not in r]
    assert [(r["step"], r["loss"]) for r in printed] == [(0, 2.0), (10, 0.1818), (20, 0.0952)]
    bars = [r for r in recs if "max_steps" in r]
    assert bars[-1]["step"] == 25 and bars[-1]["max_steps"] == 25 and bars[-1]["loss"] == 0.08
    assert p.progress["eta_s"] == 0.0


def test_bar_shapes_and_plain_prints() -> None:
    p = LogParser()
    out = p.feed(b"\r 10%|#         | 10/100 [00:20<03:00,  2.00s/it, loss=0.5]\r", 5.0)
    assert out == [{"t": 5.0, "step": 10, "max_steps": 100, "loss": 0.5}]
    assert p.progress["rate"] == 0.5 and p.progress["eta_s"] == 180.0
    p = LogParser()
    assert p.feed(b"\r42it [00:10,  4.01it/s]\r", 1.0) == [{"t": 1.0, "step": 42}]
    assert p.progress["total"] is None and "eta_s" not in p.progress
    p = LogParser()
    out = p.feed(b"epoch 1 step 120/1000 loss: 0.53 lr=3e-4\nTrain Loss = 1.5\nsaving model\n", 2.0)
    assert out == [{"epoch": 1, "step": 120, "max_steps": 1000, "loss": 0.53, "lr": 3e-4, "t": 2.0},
                   {"train_loss": 1.5, "step": 120, "t": 2.0}]  # the step printed last, not an invented one
    p = LogParser()
    assert p.feed(b"loss went down\nno numbers here\n", 0.0) == []  # nothing invented
    # redraws between two reads become one record; a partial line waits for its end
    p = LogParser()
    data = b"".join(b"\r%3d%%|#| %d/50 [00:01<00:01, 25.0it/s]" % (i * 2, i) for i in range(1, 40))
    assert len(p.feed(data, 0.0)) == 1 and p.progress["step"] == 38  # the 39th is not terminated yet


# ---- end to end ---------------------------------------------------------------------------------
def _job(tmp_path: Path, name: str, script: Path, run: str, **extra: object) -> Path:
    d = tmp_path / name
    d.mkdir()
    shutil.copy(script, d / script.name)
    (d / "job.yaml").write_text(json.dumps({"name": name, "run": run, **extra}))
    return d / "job.yaml"


def _running_status(host: str, job_id: str, ok, timeout: float = 90) -> dict:
    st: dict = {}

    def seen() -> bool:  # wait_for spaces the looks by what each costs: a CLI call is CPU the job needs
        st.clear()
        st.update(json.loads(run_cli("status", job_id, "--host", host, "--json").stdout))
        assert st["state"] in ("queued", "running"), st
        return st["state"] == "running" and bool(ok(st))

    wait_for(seen, timeout, lambda: f"never saw it: {json.dumps(st)[:2000]}", interval=0.3)
    return st


def test_a_job_that_only_prints_shows_loss_rate_eta_plots_and_notifies(ssh_host: str, tmp_path: Path, hook) -> None:
    needs("tqdm", "matplotlib")
    from tests.remote.run.test_events import notify_cfg

    host = ssh_host  # over the real sshd, with a price: the notification carries the cost
    r = run_cli("host", "set", host, "--price", "3.6")
    assert r.returncode == 0, r.stderr
    job = _job(tmp_path, "printer", SCRIPTS / "tqdm_tiny.py", "python tqdm_tiny.py 150 0.06",
               notify=notify_cfg(hook, ["succeeded"]))
    job_id = submit(host, job)["job_id"]
    st = _running_status(host, job_id, lambda s: (s.get("latest_metrics") or {}).get("step", 0) >= 20
                         and s.get("eta_s") is not None)
    assert st["metrics_source"] == "log"
    assert st["max_steps"] == 150 and st["steps_per_s"] > 1
    assert 0 < st["eta_s"] < 150
    assert st["loss_key"] == "loss" and st["latest_metrics"]["loss"] < 1
    text = run_cli("status", job_id, "--host", host, env_extra={"COLUMNS": "160"}).stdout
    assert "steps/s" in text and "ETA" in text and "loss" in text

    done = wait_state(host, job_id, ("succeeded", "failed"))
    assert done["state"] == "succeeded"
    out = tmp_path / "printer.png"
    r = run_cli("plot", job_id, "--host", host, "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["metrics_source"] == "log" and "loss" in doc["keys"] and doc["points"]["loss"] >= 3
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    body = hook.wait_for("succeeded", 30)["body"]
    assert body["metrics_source"] == "log"
    assert body["metrics"]["loss"] == pytest.approx(2.0 / 150, rel=0.01) and body["metrics"]["step"] == 150
    assert body["cost"] is not None and body["cost"] > 0 and body["currency"]


TB_SCRIPT = '''
import argparse, time
from torch.utils.tensorboard import SummaryWriter
ap = argparse.ArgumentParser()
ap.add_argument("--max_steps", type=int)
n = ap.parse_args().max_steps
w = SummaryWriter("runs/exp")  # where torch puts it by default: under the code folder
for step in range(1, n + 1):
    w.add_scalar("Loss/train", 3.0 / step, step)
    if step % 20 == 0:
        w.add_scalar("Loss/val", 4.0 / step, step)
    w.flush()
    time.sleep(0.05)
w.close()
print("done")
'''


def test_a_job_that_only_writes_tensorboard(any_host: str, tmp_path: Path) -> None:
    needs("torch", "tensorboard", "matplotlib")
    d = tmp_path / "tbonly"
    d.mkdir()
    (d / "main.py").write_text(TB_SCRIPT)
    (d / "job.yaml").write_text(json.dumps({"name": "tbonly", "run": "python main.py --max_steps 160"}))
    job_id = submit(any_host, d / "job.yaml")["job_id"]
    st = _running_status(any_host, job_id, lambda s: s.get("metrics_source") == "tensorboard"
                         and (s.get("latest_metrics") or {}).get("step", 0) >= 30 and s.get("eta_s") is not None,
                         timeout=120)
    assert st["loss_key"] == "Loss/train" and st["max_steps"] == 160  # the --max_steps flag of run:
    assert st["steps_per_s"] > 1 and 0 < st["eta_s"] < 160
    done = wait_state(any_host, job_id, ("succeeded", "failed"))
    assert done["state"] == "succeeded" and done["metrics_source"] == "tensorboard"
    assert done["last_metrics"]["step"] == 160
    out = tmp_path / "tb.png"
    doc = json.loads(run_cli("plot", job_id, "--host", any_host, "-o", str(out), "--json").stdout)
    assert doc["points"]["Loss/train"] == 160 and doc["points"]["Loss/val"] == 8


NAN_SCRIPT = '''
import time
for step in range(1, 400):
    loss = 1.0 / step if step < 8 else float("nan")
    print(f"step {step} loss: {loss}", flush=True)
    time.sleep(0.1)
'''


def test_nan_loss_policy_reads_the_log(tmp_path: Path) -> None:
    d = tmp_path / "nanlog"
    d.mkdir()
    (d / "main.py").write_text(NAN_SCRIPT)
    (d / "job.yaml").write_text(json.dumps({"name": "nanlog", "run": "python main.py",
                                            "autostop": {"nan_loss": True, "check_every": "1s"}}))
    job_id = submit("local", d / "job.yaml")["job_id"]
    st = wait_state("local", job_id, ("autostopped", "succeeded", "failed"), timeout=60)
    assert st["state"] == "autostopped" and st["reason"].startswith("autostop: nan_loss"), st
    assert st["metrics_source"] == "log" and st["last_metrics"]["step"] < 60


CALLBACK_SCRIPT = '''
import torch
import gpujob_runtime as gj
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
data = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.randint(0, 64, (8,))} for _ in range(16)]
args = TrainingArguments(output_dir="out", num_train_epochs=2, per_device_train_batch_size=4, logging_steps=2,
                         save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=data, callbacks=[gj.trainer_callback()]).train()
'''


def test_runtime_callback_reports_the_trainers_total(tmp_path: Path) -> None:
    """With the runtime helper's callback, every record carries max_steps (epochs × steps): status has an ETA."""
    needs("torch", "transformers")
    import os
    import subprocess
    import sys

    (tmp_path / "main.py").write_text(CALLBACK_SCRIPT)
    metrics = tmp_path / "metrics.jsonl"
    env = dict(os.environ, PYTHONPATH=str(REPO / "templates" / "runtime"), GPUJOB_METRICS_FILE=str(metrics),
               GPUJOB_JOB_DIR=str(tmp_path), GPUJOB_STOP_FILE=str(tmp_path / "STOP"))
    r = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    recs = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [x["step"] for x in recs if "loss" in x] == [2, 4, 6, 8]
    assert all(x["max_steps"] == 8 for x in recs)  # 2 epochs × 4 steps


def test_plot_gives_single_values_no_panel_and_keeps_the_title_clear(tmp_path: Path) -> None:
    needs("matplotlib")
    from gpujob.errors import GpujobError
    from gpujob.ui.plot import figure, plot_series

    series = {"loss": [[i, 4.5 - i / 100, None] for i in range(1, 13)], "eval_loss": [[6, 4.54, None], [12, 4.5, None]],
              "learning_rate": [[i, 5e-5 * (1 - i / 12), None] for i in range(1, 13)],
              "train_runtime": [[12, 2.003, None]], "total_flos": [[12, 1234.0, None]]}
    fig, curves = figure(series, "hf-tiny-11301700-abcde")
    assert curves == ["loss", "eval_loss", "learning_rate"] and len(fig.axes) == 2
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    title = fig._suptitle.get_window_extent(r)
    first = fig.axes[0].get_tightbbox(r)  # the panel with its tick labels
    assert title.y0 >= first.y1, (title, first)  # above the first panel, not over it
    note = fig._supxlabel.get_window_extent(r)
    assert "train_runtime = 2.003" in fig._supxlabel.get_text() and note.y1 <= fig.axes[-1].get_tightbbox(r).y0
    out = tmp_path / "p.png"
    assert plot_series(series, out, "t") == curves and out.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(GpujobError) as e:
        plot_series({"train_runtime": [[12, 2.0, None]]}, out, "t")
    assert "single values only: train_runtime" in e.value.cause


def test_total_from_epochs() -> None:
    from remote.metrics.totals import total_from_epochs

    assert total_from_epochs([{"step": 10, "epoch": 0.25}], 3) == 120  # HF: a fractional epoch
    # Lightning (as its TensorBoardLogger wrote it: 8 batches an epoch, logged every 2nd step from 0)
    lightning = [{"step": 5, "epoch": 0.0}, {"step": 7, "epoch": 0.0}, {"step": 9, "epoch": 1.0}]
    assert total_from_epochs(lightning, 2) == 16  # the epoch ends between step 7 and step 9
    assert total_from_epochs([{"step": 12, "epoch": 1.0}], 2) is None  # no change seen: no guess
    assert total_from_epochs(lightning, None) is None
    # an accelerate loop printing "epoch E step S" every 10 steps, 40 an epoch: [40, 43.3) a epoch
    acc = [{"step": s, "epoch": (s - 1) // 40} for s in range(10, 170, 10)]
    # its steps come by 10: an epoch of 40..43.3 is 40 (the truth, 160), not the middle 41.7 (167)
    assert total_from_epochs(acc, 4) == 160 and total_from_epochs(acc[:5], 4) == 180
    # Lightning read mid-run: step 15 the last of epoch 1 allows 7.5..9 an epoch; by 2s that is 8
    assert total_from_epochs([{"step": s, "epoch": float(s // 8)} for s in range(1, 16, 2)], 6) == 48


def test_a_lightning_job_with_its_default_bar_and_logger(tmp_path: Path) -> None:
    """Lightning with rich installed draws nothing into a log until the end: TensorBoard carries it."""
    needs("torch", "lightning", "tensorboard")
    go = tmp_path / "go"  # the job holds before its last epoch until the test has seen it mid-way (under load too)
    job = _job(tmp_path, "light", SCRIPTS / "lightning_tiny.py",
               f"python lightning_tiny.py --bar rich --max_epochs 6 --sleep 0.15 --hold_last_epoch_until {go}",
               runtime={"auto": False})  # the Trainer hook would write the metrics file (bring-your-own.md)
    job_id = submit("local", job)["job_id"]
    try:
        st = _running_status("local", job_id, lambda s: s.get("metrics_source") == "tensorboard"
                             and s.get("eta_s") is not None, timeout=120)
    finally:
        go.touch()
    assert st["loss_key"] == "train_loss" and st["max_steps"] == 48  # 6 epochs × 8 batches
    assert st["steps_per_s"] > 0 and st["eta_s"] > 0
    done = wait_state("local", job_id, ("succeeded", "failed"), timeout=120)
    assert done["state"] == "succeeded" and done["metrics_source"] == "tensorboard"
    assert done["last_metrics"]["step"] >= 47


def test_data_preparation_bars_are_not_training_progress() -> None:
    p = LogParser()
    p.feed(b"Map: 100%|##########| 1000/1000 [00:00<00:00, 5120.33 examples/s]\n"
           b"Loading checkpoint shards: 100%|##| 2/2 [00:01<00:00,  1.50it/s]\n"
           b"model.safetensors: 100%|##| 500M/500M [00:05<00:00, 98.1MB/s]\n", 0.0)
    assert p.progress == {}
    out = p.feed(b"\r  8%|8         | 1/12 [00:00<00:06,  1.61it/s]\r", 1.0)
    assert out == [{"t": 1.0, "step": 1, "max_steps": 12}] and p.progress["total"] == 12
