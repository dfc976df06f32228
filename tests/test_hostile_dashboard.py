"""A hostile agent's log with no newline (600 MiB) cannot grow ``gpujob ui``'s memory while a
job page is open: a page gets the end of each line (8 KiB), so the log queue stays small."""

from __future__ import annotations

import http.client
import sys
from pathlib import Path

from tests.helpers import needs, wait_for
from tests.hostile import install_hostile
from tests.test_dashboard import start_ui
from tests.test_hostile_agent import MiB

needs("starlette", "uvicorn")

HOSTILE = r'''#!{python}
import json, sys, time
verb = sys.argv[sys.argv.index("--root") + 2]
out = sys.stdout.buffer
job = {{"job_id": "j-1", "state": "running", "host": "local"}}
if verb == "logs":
    out.write(b"gpujob-log j-1 0\n")
    block = b"a" * (1 << 20)
    for _ in range(600):
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
        assert grown < 128 * MiB, grown >> 20  # 619 MiB when the queue held whole 1 MiB pieces
    finally:
        p.terminate()
        p.wait(timeout=10)
