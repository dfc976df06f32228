"""``status -w`` when the link dies: it ends with the link's error (exit 3, no traceback) when
the link stays cut or frozen; it never waits forever. (``tail -f`` reconnects instead, for up
to 30 tries with a growing pause: tests/faults/test_link_faults.py.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.faults.linkproxy import LinkProxy
from tests.faults.test_link_faults import cli, via  # noqa: F401  (the fixture)
from tests.helpers import submit, wait_for, write_job

FOREVER = """
import time
print("up", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("fault", ["cut", "freeze"])
def test_status_watch_ends_when_the_link_stays_dead(via: tuple[str, LinkProxy], tmp_path: Path,  # noqa: F811
                                                    fault: str) -> None:
    host, proxy = via
    job_id = submit(host, write_job(tmp_path, "live", FOREVER, "python main.py"))["job_id"]
    log = tmp_path / "remote-root" / "jobs" / job_id / "output.log"
    wait_for(lambda: log.exists() and "up" in log.read_text(), 60, "the job to start")
    p = cli("status", job_id, "--host", host, "-w")
    wait_for(lambda: proxy.bytes > 0 and p.poll() is None, 30, "the view to start")
    getattr(proxy, fault)()
    try:
        out, err = p.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError(f"status -w still running 180 s after the link was {fault}") from None
    text = err.decode()
    assert p.returncode == 3, (p.returncode, text)
    assert "Traceback" not in text
