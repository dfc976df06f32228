"""``gpujob ls`` at 80 columns (the width without a terminal): columns give way whole, by
importance; a header is never cut, HOST stays before less important columns, a line is read
from its start."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

from tests.conftest import run_cli
from tests.helpers import wait_state

T = 1_800_000_000.0
JOBS = [
    {"job_id": "gpt2-small-11300043-wj047", "host": "a100-westb", "state": "running", "attempt": 2,
     "started_at": T - 3725, "now": T, "last_metrics": {"step": 1200, "loss": 2.3456},
     "last_line": "{'loss': 2.3456, 'grad_norm': 1.23, 'learning_rate': 0.0003, 'epoch': 0.5}"},
    {"job_id": "tiny-11300101-ab123", "host": "local", "state": "autostopped", "attempt": 1,
     "started_at": T - 80, "ended_at": T - 20, "last_metrics": {"step": 200, "loss": 0.0123}, "last_line": "done"},
]


def render(width: int, jobs: list[dict] = JOBS) -> str:
    from rich.console import Console

    from gpujob.ui.jobs import jobs_table

    c = Console(file=io.StringIO(), width=width, color_system=None)
    c.print(jobs_table(jobs, width=width))
    return "\n".join(line.rstrip() for line in c.file.getvalue().splitlines())


def test_80_columns() -> None:
    assert render(80) == textwrap.dedent("""\
        JOB                        HOST        STATE        ELAPSED  STEP  LAST LOSS
        gpt2-small-11300043-wj047  a100-westb  running      1h02m    1200  2.346
        tiny-11300101-ab123        local       autostopped  1m00s    200   0.0123
        not shown at 80 columns: ATTEMPT, LAST LINE (--wide: all; --columns a,b: those)""")


def test_wide_shows_the_start_of_the_last_line() -> None:
    out = render(140).splitlines()
    assert out[0].split() == ["JOB", "HOST", "STATE", "ATTEMPT", "ELAPSED", "STEP", "LAST", "LOSS", "LAST", "LINE"]
    assert out[1].endswith("  {'loss': 2.3456, 'grad_norm': 1.23, 'learning_rate':…")
    assert out[2].endswith("done")


def test_narrow_drops_less_important_columns_first() -> None:
    assert render(60).splitlines()[0].split() == ["JOB", "HOST", "STATE", "STEP"]
    assert render(45).splitlines()[0].split() == ["JOB", "STATE"]
    queued = [dict(JOBS[0], state="queued", queue_position=3)]
    assert "QUEUE" in render(120, queued) and "QUEUE" not in render(120)  # an empty column is left out
    for w in (80, 60):
        assert all(len(line) <= w for line in render(w).splitlines())
        assert "…" not in render(w).splitlines()[0]


def test_ls_without_a_terminal(tmp_path: Path) -> None:
    d = tmp_path / "p"
    d.mkdir()
    (d / "job.yaml").write_text(json.dumps({"name": "a-rather-long-job-name", "run": "echo [bold]x[/bold] " + "y" * 100}))
    job_id = json.loads(run_cli("submit", str(d / "job.yaml"), "--json").stdout)["job_id"]
    wait_state("local", job_id, ("succeeded",))
    r = run_cli("ls", env_extra={"COLUMNS": ""})
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and all(len(line) <= 80 for line in lines), r.stdout
    assert lines[0].split()[:3] == ["JOB", "HOST", "STATE"] and job_id in lines[1] and "succeeded" in lines[1]
