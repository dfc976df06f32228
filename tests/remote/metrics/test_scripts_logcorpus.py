"""The log reader on lines in the style of public training scripts (tests/remote/metrics/data/logcorpus/NAME.txt),
each file with its expected reading (NAME.json: the reader's hints and every record, without ``t``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remote.metrics.logparse import LogParser
from remote.metrics.totals import run_hints
from tests.conftest import run_cli
from tests.helpers import submit, write_job
from tests.remote.metrics.test_metrics_sources import _running_status as running_status

CORPUS = Path(__file__).parent / "data" / "logcorpus"


@pytest.mark.parametrize("name", sorted(p.stem for p in CORPUS.glob("*.txt")))
def test_corpus_reads_as_expected(name: str) -> None:
    want = json.loads((CORPUS / f"{name}.json").read_text())
    data = (CORPUS / f"{name}.txt").read_bytes()
    for chunk in (len(data), 61):  # all at once, and cut anywhere
        p = LogParser(**want["hints"])
        got = []
        for i in range(0, len(data), chunk):
            got += p.feed(data[i:i + chunk], float(i // chunk))
        assert [{k: v for k, v in r.items() if k != "t"} for r in got] == want["records"], name


def test_totals_from_the_run_line_and_its_config_file(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "train_char.py").write_text("max_iters = 5000\nbatch_size = 64\n"
                                                       "def f():\n    max_iters = 1\n")
    (tmp_path / "hp.yaml").write_text("trainer:\n  max_epochs: 12\n")
    assert run_hints({"run": "python train.py config/train_char.py"}, tmp_path) == {"max_steps": 5000}
    assert run_hints({"run": "python train.py config/train_char.py --max_iters=500"}, tmp_path) == {"max_steps": 500}
    assert run_hints({"run": "python main.py fit --config hp.yaml"}, tmp_path) == {"epochs": 12}
    assert run_hints({"run": "python main.py --num_epochs 3 --max_steps=90"}) == {"epochs": 3, "max_steps": 90}
    # accelerate's and diffusers' examples: --max_train_steps (it had no total, so no ETA)
    assert run_hints({"run": "accelerate launch train.py --max_train_steps 800 --num_train_epochs 2"}) == \
        {"epochs": 2, "max_steps": 800}
    assert run_hints({"run": "python main.py --epochs 3", "metrics": {"total": {"epochs": 300}}}) == {"epochs": 300}


def test_a_format_taught_in_the_job_file() -> None:
    p = LogParser(patterns=[r"^E(?P<epoch>\d+) b(?P<batch>\d+)/(?P<batches>\d+)", r"L=(?P<loss>[\d.]+)"], epochs=5)
    got = p.feed(b"E0 b5/10 L=0.75 acc 3\nloss: 9 (not matched by the patterns: read as before)\n", 1.0)
    assert got[0] == {"epoch": 0, "step": 5, "max_steps": 50, "loss": 0.75, "t": 1.0}
    assert got[1] == {"loss": 9.0, "step": 5, "t": 1.0}


PRINTER = """
    import sys, time
    fmt = sys.argv[1]
    for epoch in range(30):
        for b in range(0, 11):
            if fmt == "image":
                print("Train: %d [ %2d/10 (%3d%%)]  Loss: 0.485 (0.51)  Time: 0.050s  LR: 1.000e-03" % (epoch, b, b * 10),
                      flush=True)
            else:
                print("E%d b%d/10 L=%.3f" % (epoch, b, 1.0 / (1 + epoch)), flush=True)
            time.sleep(0.1)
"""


def test_status_shows_step_progress_rate_and_eta_for_these_formats(tmp_path: Path) -> None:
    """The image trainer's lines out of the box (total from --epochs on the run line); a format of the
    user's own, taught in the job file (metrics.patterns, metrics.total)."""
    image = write_job(tmp_path, "imgfmt", PRINTER, "python main.py image --epochs 30")
    own = write_job(tmp_path, "ownfmt", PRINTER, "python main.py own",
                    metrics={"patterns": [r"^E(?P<epoch>\d+) b(?P<batch>\d+)/(?P<batches>\d+)", r"L=(?P<loss>[\d.]+)"],
                             "total": {"epochs": 30}})
    ids = [submit("local", image)["job_id"], submit("local", own)["job_id"]]
    for job_id in ids:
        st = running_status("local", job_id, lambda s: s.get("eta_s") is not None and s.get("steps_per_s"), 90)
        assert st["max_steps"] == 300 and 0 < st["latest_metrics"]["step"] < 300 and st["loss_key"] == "loss", st
        assert 0 < st["billing"]["progress"] < 1 and st["eta_s"] > 0 and st["steps_per_s"] > 0, st
        assert run_cli("stop", job_id, "--host", "local").returncode == 0
