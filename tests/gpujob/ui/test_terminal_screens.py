"""What a user sees on a real terminal (tmux, 80 and 120 columns): the README's first command,
``tail -f``, ``status -w`` and every table, read off the screen: no reprinted progress bar, no line
the terminal had to wrap, no number cut."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import EXAMPLE
from tests.screen import Screen, assert_fits

WIDTHS = (80, 120)
BAR = re.compile(r"━|sync →|\d+(\.\d+)? ?[kMG]?B/s")  # the transfer bar's glyphs, label and rate


@pytest.mark.parametrize("width", WIDTHS)
def test_submit_follow_prints_the_log_without_the_finished_bar(tmp_path: Path, width: int) -> None:
    with Screen(tmp_path, width, 24) as s:
        s.run("submit", str(EXAMPLE), "--follow")
        assert s.wait_exit() == 0, s.text()
        rows = s.rows()
        steps = [r for r in rows if re.search(r"\bstep \d+", r)]
        assert len(steps) >= 4, s.text()
        assert not [r for r in rows if BAR.search(r)], "the sync bar was left on the screen:\n" + s.text()
        # each log line whole on its row, as the script printed it (a line longer than the screen,
        # the script's own, wraps as on any terminal: gpujob's lines never do)
        assert all(re.fullmatch(r"step \d+ loss [0-9.]+", r) for r in steps), s.text()
        assert_fits(s, ours=lambda r: r.startswith(("==>", "submitted", "tiny-")))


LOOP = """
    import argparse, time
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--warmup-fraction", "--warmup_fraction", type=float, default=0.0)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--sleep", type=float, default=0.0)
    a = p.parse_args()
    w = 5.0
    for step in range(1, a.steps + 1):
        w -= a.lr * w
        print(f"step {step} loss {w * w + 0.0123456:.6f}", flush=True)
        time.sleep(a.sleep)
"""
NAME = "a-rather-long-experiment-name-for-tables"


def _jobs(tmp_path: Path) -> list[str]:
    """Two finished runs of a long-named job whose parameters differ (the ledger's rows, ls's, cost's)."""
    import json

    from tests.conftest import run_cli
    from tests.helpers import wait_state, write_job

    job = write_job(tmp_path, NAME, LOOP, "python main.py --lr 0.1 --warmup-fraction 0.05 --steps 30")
    ids = []
    for lr in ("0.1", "0.2"):
        r = run_cli("submit", str(job), "--json", "--set", f"run=python main.py --lr {lr} --warmup-fraction 0.05 --steps 30")
        assert r.returncode == 0, r.stderr
        ids.append(json.loads(r.stdout)["job_id"])
    for i in ids:
        wait_state("local", i, ("succeeded",))
    return ids


CUT_NUMBER = re.compile(r"(?<![\w.-])\d[\d.,]*…")  # a cell that is a number cut short (not an id's middle)


@pytest.mark.parametrize("width", WIDTHS)
def test_every_table_reads_whole_at_the_terminals_width(tmp_path: Path, width: int) -> None:
    import json

    from tests.conftest import run_cli

    ids = _jobs(tmp_path)
    runs = {r["job_id"]: r for r in json.loads(run_cli("runs", "--json").stdout)["runs"]}
    losses = [f"{runs[i]['best']['loss']:.4g}" for i in ids]
    for cmd in (["ls"], ["status"], ["runs"], ["compare", *ids], ["cost"], ["host", "ls"]):
        with Screen(tmp_path, width, 40) as s:
            s.run(*cmd)
            assert s.wait_exit() == 0, (cmd, s.text())
            assert_fits(s)
            text = s.text()
            assert not CUT_NUMBER.search(text), (cmd, text)
            if cmd[0] in ("ls", "status", "cost"):
                assert all(i in text or i.rsplit("-", 1)[-1] in text for i in ids), (cmd, text)
            if cmd[0] in ("runs", "compare"):  # the loss whole, for each run
                assert all(v in text for v in losses), (cmd, losses, text)
            if cmd[0] in ("ls", "status") and width == 80:  # what gave way is named
                assert "not shown at 80 columns: LAST LINE" in text, (cmd, text)
    # --wide: every column, --columns: those named
    with Screen(tmp_path, width, 40) as s:
        s.run("runs", "--columns", "run,loss,lr")
        assert s.wait_exit() == 0
        assert s.rows()[0].split() == ["RUN", "BEST", "LOSS", "lr"], s.text()  # loss: the best, as before
    with Screen(tmp_path, width, 40) as s:
        s.run("runs", "--wide")
        assert s.wait_exit() == 0
        assert s.rows(joined=True)[0].split() == ["RUN", "HOST", "STATE", "STARTED", "lr", "BEST", "LOSS", "LAST", "LOSS",
                                                 "COST"], s.text()
    r = run_cli("runs", "--columns", "nosuch")
    assert r.returncode == 2 and "no column 'nosuch'" in r.stderr and "run,host,state" in r.stderr, r.stderr


@pytest.mark.parametrize("width", WIDTHS)
def test_tail_f_and_status_w_draw_each_line_once_and_whole(tmp_path: Path, width: int) -> None:
    import json

    from tests.conftest import run_cli
    from tests.helpers import write_job

    job = write_job(tmp_path, NAME, LOOP, "python main.py --steps 40 --sleep 0.05")
    job_id = json.loads(run_cli("submit", str(job), "--json").stdout)["job_id"]
    with Screen(tmp_path, width, 60) as tail, Screen(tmp_path, width, 30) as watch:
        tail.run("tail", job_id, "-f", "-n", "100")
        watch.run("status", job_id, "-w", "--interval", "0.3")
        assert tail.wait_exit() == 0 and watch.wait_exit() == 0, tail.text() + watch.text()
        steps = [r for r in tail.rows() if "step" in r and "loss" in r]
        assert [int(r.split()[1]) for r in steps] == list(range(1, 41)), tail.text()  # each once, in order
        assert all(re.fullmatch(r"step \d+ loss [0-9.]+", r) for r in steps), tail.text()
        assert_fits(tail, ours=lambda r: r.startswith("==>"))  # the job's own long lines wrap, as anywhere
        # the panel redrawn in place: one copy on the screen, the final state, every line within the width
        assert watch.text().count("state ") == 1 and "succeeded" in watch.text(), watch.text()
        assert_fits(watch)
        assert not CUT_NUMBER.search(watch.text()), watch.text()
    # status -w without a job: the job list redrawn in place until Ctrl-C
    with Screen(tmp_path, width, 30) as watch:
        watch.run("status", "-w", "--interval", "0.3")
        watch.wait_screen(lambda t: "succeeded" in t, 60, "the job list")
        watch.keys("C-c")
        assert watch.wait_exit() == 130, watch.text()
        assert watch.text().count("JOB ") == 1 and job_id.rsplit("-", 1)[-1] in watch.text(), watch.text()
        assert_fits(watch)
        assert not CUT_NUMBER.search(watch.text()), watch.text()


def test_a_sweep_leaderboard_fits_80_columns(tmp_path: Path) -> None:
    import json

    from tests.conftest import run_cli
    from tests.helpers import needs, write_job

    needs("optuna")
    sweep = {"method": "random", "trials": 2, "seed": 1,
             "params": {"lr": {"low": 1e-3, "high": 0.3, "log": True}, "warmup_fraction": [0.01, 0.1]}}
    job = write_job(tmp_path, NAME, LOOP, "python main.py --steps 10", sweep=sweep)
    r = run_cli("sweep", str(job), "--hosts", "local", "--name", "long-named-sweep-for-the-screen", "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    values = [f"{t['value']:.4g}" for t in json.loads(r.stdout)["trials"]]
    assert len(values) == 2, r.stdout
    for width in WIDTHS:
        with Screen(tmp_path, width, 30) as s:
            s.run("sweep", "status", "long-named-sweep-for-the-screen")
            assert s.wait_exit() == 0, s.text()
            assert_fits(s)
            text = s.text()
            assert "sweep long-named-sweep-for-the-screen" in text and all(v in text for v in values), text
            assert not CUT_NUMBER.search(text), text
