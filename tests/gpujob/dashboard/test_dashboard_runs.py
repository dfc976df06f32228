"""``gpujob ui``'s ledger side and its edges: the runs page and compare from the run ledger (runs
no host holds any more), the ``ls`` record's GPU use in the jobs table, and ``--open``.

Real server, real jobs on ``local``, Debian's headless chromium through Playwright (nothing
leaves loopback); the screenshots land in ``<tmp>/screenshots``.
"""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.gpujob.dashboard.test_dashboard import CHROMIUM, FLAGS, ui_server  # noqa: F401 - the fixture, shared
from tests.helpers import needs, submit, wait_for, wait_state, write_job

needs("starlette", "uvicorn")

CURVE = """
import json, os, sys
with open(os.environ["GPUJOB_METRICS_FILE"], "a") as m:
    for step in range(1, 6):
        m.write(json.dumps({"step": step, "loss": float(sys.argv[2]) / step}) + "\\n")
"""


def test_compare_from_the_ledger_in_a_browser(tmp_path: Path, ui_server: Callable[..., tuple]) -> None:  # noqa: F811
    """Two runs differing in --lr, one removed from its host: the runs page lists both (from the ledger),
    compare overlays their curves and names the parameter that differs."""
    needs("playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"needs {CHROMIUM}: apt-get install chromium (.ci/run does)")
    from playwright.sync_api import expect, sync_playwright

    ids = [submit("local", write_job(tmp_path, f"ledger-{i}", CURVE, f"python main.py --lr {lr}"))["job_id"]
           for i, lr in enumerate(("0.001", "0.003"))]
    for job in ids:  # status (in wait_state) brings the ledger its curves
        wait_state("local", job, ("succeeded",), root=tmp_path / "local-root")
    gone = run_cli("rm", ids[0], "--host", "local")
    assert gone.returncode == 0, gone.stderr
    assert ids[0] not in run_cli("ls", "--all", "--host", "local").stdout
    _, info = ui_server("--host", "local")
    base = f"http://127.0.0.1:{info['port']}"
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(info["url"])  # the token, then the cookie
            page.goto(f"{base}/runs")
            for job in ids:
                expect(page.locator(f'#runs tr[data-key="{job}"]')).to_be_visible(timeout=20_000)
            expect(page.locator('#runs th[data-key="p:lr"]')).to_have_text("lr")  # the varying parameter's column
            page.fill("#runs-where", "lr<0.002")  # the ledger's own filter (gpujob runs --where)
            page.click("#runs-apply")
            expect(page.locator("#runs tbody tr")).to_have_count(1)
            expect(page.locator("#runs tbody tr")).to_have_attribute("data-key", ids[0])
            page.fill("#runs-where", "lr")  # a user's mistake: the ledger's message, on the page
            page.click("#runs-apply")
            expect(page.locator("#runs-error")).to_contain_text("not KEY OP VALUE")
            page.fill("#runs-where", "")
            page.click("#runs-apply")
            expect(page.locator("#runs-error")).to_have_text("")
            expect(page.locator("#runs tbody tr")).to_have_count(2)
            page.screenshot(path=str(shots / "runs.png"), full_page=True)
            for job in ids:
                page.check(f'#runs tr[data-key="{job}"] input[type=checkbox]')
            page.click("#compare-runs")
            expect(page.locator('.chart[data-metric="loss"]')).to_be_visible(timeout=30_000)
            assert page.locator('.chart[data-metric="loss"]').get_attribute("data-points") == "5"
            rows = page.locator("#params tbody tr")
            expect(rows.filter(has_text="lr")).to_contain_text("0.001")
            expect(rows.filter(has_text="lr")).to_contain_text("0.003")
            page.screenshot(path=str(shots / "compare-ledger.png"), full_page=True)
        finally:
            browser.close()


def test_open_hands_the_url_to_the_browser_without_the_token_in_argv(tmp_path: Path,
                                                                       ui_server: Callable[..., tuple],  # noqa: F811
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``--open`` runs $BROWSER (here a script that records its arguments): it gets a private file that
    leads to the dashboard, never the token itself (any local user can read a process's argv)."""
    said = tmp_path / "browser-args"
    opener = tmp_path / "opener"
    opener.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {said}.tmp && mv {said}.tmp {said}\n")
    opener.chmod(0o755)
    monkeypatch.setenv("BROWSER", str(opener))
    _, info = ui_server("--host", "local", "--open")
    wait_for(said.exists, 30, "the browser opener to be run")
    args = said.read_text().split()
    token = info["url"].split("token=", 1)[1]
    assert len(args) == 1 and token not in args[0], args
    assert args[0].startswith("file://")
    landing = Path(args[0][len("file://"):])
    assert landing.stat().st_mode & 0o077 == 0  # only this user reads it
    assert token not in landing.read_text()  # a one-time ticket, not the token
    ticket_url = re.search(r'url=([^"]+)"', landing.read_text()).group(1).replace("&amp;", "&")
    assert ticket_url.startswith(f"http://127.0.0.1:{info['port']}/?ticket=")
    with urllib.request.urlopen(ticket_url, timeout=10) as r:  # the browser's first visit gets in...
        assert r.status == 200 and "gpujob_ui=" in (r.headers.get("set-cookie") or "")
    assert not landing.exists()  # ...and spends the ticket: the page is gone
    with pytest.raises(urllib.error.HTTPError) as e:  # a second use is refused
        urllib.request.urlopen(ticket_url, timeout=10)
    assert e.value.code == 403
    # no $BROWSER and no display: Python would start a text browser that takes over this terminal
    text_browser = tmp_path / "bin" / "www-browser"
    text_browser.parent.mkdir()
    text_browser.write_text(f"#!/bin/sh\ntouch {tmp_path / 'text-browser-ran'}\n")
    text_browser.chmod(0o755)
    for var in ("BROWSER", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", f"{text_browser.parent}{os.pathsep}{os.environ['PATH']}")
    p, _ = ui_server("--host", "local", "--open")
    assert p.stderr is not None
    err: list[str] = []  # read as it comes: the server runs on (the fixture ends it)
    threading.Thread(target=lambda: err.extend(iter(p.stderr.readline, "")), daemon=True).start()  # type: ignore[union-attr]
    wait_for(lambda: "open the URL above" in "".join(err), 30, "the note that no browser was started")
    assert "no graphical browser here" in "".join(err), err
    assert not (tmp_path / "text-browser-ran").exists()


def test_every_running_job_shows_its_gpu_use_without_its_page(tmp_path: Path, ui_server: Callable[..., tuple],  # noqa: F811
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``ls`` record carries the sampler's newest GPU sample (an ``nvidia-smi`` stand-in here): the
    jobs table fills the GPU column of a job no tab has opened, with no agent call beyond the listing."""
    root = tmp_path / "local-root"
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.env").write_text("GPUJOB_GPU_SAMPLE=0.5\n")
    # the local agent and its supervisor inherit the environment: the stand-in is their nvidia-smi
    monkeypatch.setenv("PATH", f"{REPO / 'tests' / 'stand_ins'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SMI_UTIL", "73")
    job = submit("local", write_job(tmp_path, "dash-gpu", "import time\ntime.sleep(120)\n", "python main.py"))["job_id"]
    wait_state("local", job, ("running",), root=root)
    wait_for(lambda: (root / "jobs" / job / "gpu.jsonl").exists(), 30, "a GPU sample")
    listed = json.loads(run_cli("ls", "--host", "local", "--json").stdout)["jobs"]
    assert [j["gpu_now"]["now"][0]["util"] for j in listed if j["job_id"] == job] == [73]
    _, info = ui_server("--host", "local", "--interval", "1")
    token = info["url"].split("token=", 1)[1]

    def gpu_column() -> object:
        with urllib.request.urlopen(f"http://127.0.0.1:{info['port']}/api/jobs?token={token}", timeout=10) as r:
            return {row["job_id"]: row["gpu"] for row in json.load(r)["jobs"]}.get(job)

    wait_for(lambda: gpu_column() == 73, 30, "the GPU column of a job whose page was never opened")
    with urllib.request.urlopen(f"http://127.0.0.1:{info['port']}/api/stats?token={token}", timeout=10) as r:
        assert json.load(r)["calls"]["local"] >= 1
