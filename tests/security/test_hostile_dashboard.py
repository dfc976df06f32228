"""A hostile agent's log with no newline (300 MiB) cannot grow ``gpujob ui``'s memory while a
job page is open: a page gets the end of each line (8 KiB), so the log queue stays small."""

from __future__ import annotations

import http.client
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.gpujob.dashboard.test_dashboard import start_ui
from tests.helpers import needs, wait_for
from tests.hostile import install_hostile
from tests.security.test_hostile_agent import MiB
from tests.security.test_hostile_text import replies  # noqa: F401 - the fixture: a host answering from replies.json

needs("starlette", "uvicorn")

HOSTILE = r'''#!{python}
import json, sys, time
verb = sys.argv[sys.argv.index("--root") + 2]
out = sys.stdout.buffer
job = {{"job_id": "j-1", "state": "running", "host": "local"}}
if verb == "logs":
    out.write(b"gpujob-log j-1 0\n")
    block = b"a" * (1 << 20)
    for _ in range(300):
        out.write(block)
    out.flush()
    open({done!r}, "w").close()
    time.sleep(60)
else:
    out.write(json.dumps({{"jobs": [job]}} if verb == "status" else job).encode() + b"\n")
'''


def _hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_a_log_line_with_no_end_is_not_held_by_the_dashboard(tmp_path: Path) -> None:
    done = tmp_path / "flood-sent"
    install_hostile(tmp_path, "local-root", HOSTILE.format(python=sys.executable, done=str(done)))
    p, info = start_ui(tmp_path, "--host", "local")
    try:
        token = info["url"].split("token=", 1)[1]
        base = _hwm(p.pid)
        c = http.client.HTTPConnection("127.0.0.1", info["port"], timeout=30)
        c.request("GET", f"/api/job/stream?token={token}&host=local&id=j-1")
        r = c.getresponse()
        assert r.status == 200
        first = r.readline()  # the page opened; it reads no further (a slow tab)
        assert first.startswith(b"event:") or first.startswith(b"id:"), first
        wait_for(done.exists, 60, "the hostile log sent")
        grown = _hwm(p.pid) - base
        c.close()
        assert grown < 128 * MiB, grown >> 20  # 619 MiB of 600 when the queue held whole 1 MiB pieces
    finally:
        p.terminate()
        p.wait(timeout=10)


def test_an_infinite_figure_does_not_blank_the_dashboard(replies: Path, tmp_path: Path) -> None:  # noqa: F811
    """A diverged loss (``inf``, ``nan``; or a log line printing it): Starlette refuses such a float,
    so ``/api/jobs`` was a 500 and every job's row went blank; an event carried ``NaN``, which the
    browser's ``JSON.parse`` refuses. Every answer is strict JSON, the figure its word."""
    job = {"job_id": "div-1-ab12c", "state": "running", "host": "local", "started_at": 1700000000,
           "last_metrics": {"loss": float("inf"), "step": 3}, "billing": {"cost": 1.5, "currency": "USD"}}
    watch = {"job": job, "series": {"loss": [[1, 2.0], [2, float("nan")]]}, "latest": {"loss": float("nan"), "step": 2}}
    replies.write_text(json.dumps({"status": json.dumps({"jobs": [job]}), "watch": json.dumps(watch)}))
    p, info = start_ui(tmp_path, "--host", "local")
    try:
        token = info["url"].split("token=", 1)[1]
        c = http.client.HTTPConnection("127.0.0.1", info["port"], timeout=30)

        def strict(path: str) -> Any:
            c.request("GET", f"{path}&token={token}")
            r = c.getresponse()
            body = r.read()
            assert r.status == 200, (path, r.status, body[:300])
            return json.loads(body, parse_constant=lambda name: pytest.fail(f"{path}: {name} is not JSON"))

        wait_for(lambda: strict("/api/jobs?")["jobs"], 60, "the job's row")
        [row] = strict("/api/jobs?")["jobs"]
        assert row["loss"] == "inf" and row["spark"] == ["inf"], row
        wait_for(lambda: strict("/api/job?host=local&id=div-1-ab12c")["job"], 60, "the job's page")
        doc = strict("/api/job?host=local&id=div-1-ab12c")["job"]
        assert doc["series"]["loss"] == [[1, 2.0], [2, "nan"]] and doc["latest_metrics"]["loss"] == "nan", doc
        c.request("GET", f"/api/events?token={token}")
        r = c.getresponse()
        while not (line := r.readline()).startswith(b"data:"):
            assert line, "the event stream ended"
        json.loads(line[5:], parse_constant=lambda name: pytest.fail(f"an event holds {name}"))
        c.close()
    finally:
        p.terminate()
        p.wait(timeout=30)
