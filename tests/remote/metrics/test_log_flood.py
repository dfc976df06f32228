"""The log under a flood (issue 47): 20,000 wide lines a second of one format. Each shape of line is matched
once (lineshape: its digits as 0), its names and numbers read from every line; the same records as reading each line afresh;
a collect reads two chunks, past what such a flood writes between two ticks."""

from __future__ import annotations

import json
import random
from pathlib import Path

from remote.core.layout import JobDir
from remote.metrics import lineshape, metricsrc
from remote.metrics.logparse import LogParser


def wide(i: int) -> bytes:
    return (b"epoch %d | step %d | train loss %.4f | val loss 0.5120 | acc 0.91 | lr 1.0e-04 | grad_norm 1.2 | "
            b"tokens/s 40000 | mem 12.3GB\n" % (i // 5000, i, 2.0 / (1 + i / 1000.0)))


def read_afresh(lines: list[bytes]) -> list[dict]:
    """Each line read with the shapes and routes forgotten: every pattern runs on it."""
    p, out = LogParser(), []
    for line in lines:
        lineshape._shapes.clear()
        lineshape.routes.clear()
        out += p.feed(line, 1.0)
    return out


def test_a_flood_of_one_format_is_matched_once(monkeypatch) -> None:
    lines = [wide(i) for i in range(20_000)]
    lineshape._shapes.clear()
    lineshape.routes.clear()
    found = []
    real = lineshape._find
    monkeypatch.setattr(lineshape, "_find", lambda s: found.append(s) or real(s))
    data, rnd, p, recs, at = b"".join(lines), random.Random(3), LogParser(), [], 0
    while at < len(data):  # cut anywhere, as the collector's reads fall
        n = rnd.randint(1, 300_000)
        recs += p.feed(data[at:at + n], 1.0)
        at += n
    assert len(found) == 5, found  # a shape per length of the step: "step 0", "step 00", ... "step 00000"
    monkeypatch.setattr(lineshape, "_find", real)
    assert recs == read_afresh(lines)
    assert recs[-1] == {"epoch": 3, "step": 19_999, "train_loss": 0.0952, "val_loss": 0.512, "acc": 0.91,
                        "lr": 0.0001, "grad_norm": 1.2, "t": 1.0}


def test_names_with_digits_are_read_from_each_line() -> None:
    """``top1_acc`` and ``top5_acc`` (``rouge1``, ``rouge2``) have one shape (digits as 0): the name is the line's own."""
    lines = [b"step %d | top%d_acc 0.%d | rouge%d %d.5 | loss 0.25\n" % (i, 1 + 4 * (i % 2), i, 1 + i % 2, i)
             for i in range(1, 5)]
    recs = LogParser().feed(b"".join(lines), 1.0)
    assert [sorted(r) for r in recs] == [["loss", "rouge2", "step", "t", "top5_acc"], ["loss", "rouge1", "step", "t", "top1_acc"]] * 2
    assert recs == read_afresh(lines)


def test_a_collect_reads_past_what_a_flood_writes_in_a_tick(tmp_path: Path) -> None:
    """6 MiB of log (more than one 4 MiB read; a wide flood writes 5 MB between two ticks) in one collect."""
    job = JobDir(tmp_path / "jobs" / "flood-1")
    (job.path / "code").mkdir(parents=True)
    job.spec.write_text(json.dumps({"name": "flood", "run": "python train.py"}))
    n = 6 * (1 << 20) // len(wide(0)) + 1
    job.log.write_bytes(b"".join(wide(i) for i in range(n)))
    c = metricsrc.Collector(job, json.loads(job.spec.read_text()), 0.0)
    c.collect()
    assert c.log_offset == job.log.stat().st_size
    with open(job.path / "metrics.log.jsonl") as f:
        steps = [json.loads(line)["step"] for line in f]
    assert steps == list(range(n))  # every line a record, in order


def test_a_record_line_is_what_json_writes() -> None:
    """``record_line`` (layouts and float texts kept) writes each record as ``json.dumps(rec, sort_keys=True)``:
    non-finite floats, -0.0, large and small numbers, escaped names; anything else through ``json`` itself."""
    from remote.metrics.recordline import record_line

    rnd = random.Random(5)
    keys = ["loss", "a}, {b", "é", '"q', "step", "t", "\n", "\x1b"]
    vals = [1, 2.5, float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 10**30, 1e-300, 0.1 + 0.2, 1e16, 3.0,
            -3, True, None, "s", [1]]
    for _ in range(20_000):
        rec = {rnd.choice(keys): rnd.choice(vals) for _ in range(rnd.randint(0, 8))}
        assert record_line(rec) == json.dumps(rec, sort_keys=True), rec
