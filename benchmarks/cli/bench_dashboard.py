"""``gpujob ui`` with 200 jobs on 3 hosts: page load time and agent calls per minute.

Three hosts — ``local`` and two profiles over one real sshd on 127.0.0.1 (tests/conftest.py
start_sshd) — hold 67 + 67 + 66 jobs made as bench_ls.py makes them (the newest of each
running). ``gpujob ui --interval 3`` serves them; Debian's headless chromium (Playwright)
times loading the jobs page until all 200 rows are drawn, ``--loads`` times with a fresh page.
The running job samples the ``nvidia-smi`` stand-in (tests/stand_ins), so its GPU column fills from
the ``ls`` record. Then ``--tabs`` jobs pages and one job page stay open for ``--seconds`` and the server's own
count of agent calls (``/api/stats``) gives calls per minute, next to what ``gpujob ls
--watch`` makes (one call per host per 2 s refresh, per terminal).

    python benchmarks/cli/bench_dashboard.py [--loads 5] [--tabs 5] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]
WATCH_INTERVAL = 2.0  # `ls --watch`'s default refresh
STAND_INS = REPO / "tests" / "stand_ins"  # nvidia-smi: the running job's GPU is sampled as on an instance


def stats(base: str, token: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{base}/api/stats?token={token}", timeout=10) as r:
        return json.load(r)["calls"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--tabs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--interval", type=float, default=3.0)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-ui-"))
    os.environ.update(GPUJOB_CONFIG_DIR=str(tmp / "config"), GPUJOB_STATE_DIR=str(tmp / "state"),
                      GPUJOB_CACHE_DIR=str(tmp / "cache"), GPUJOB_LOCAL_ROOT=str(tmp / "local"),
                      GPUJOB_NO_SSH_AGENT="1", GPUJOB_CONNECT_RETRIES="1",
                      GPUJOB_MUX_DIR=tempfile.mkdtemp(prefix="gjmux"), PYTHONPATH=str(REPO))
    from bench_ls import make_jobs
    from playwright.sync_api import sync_playwright

    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.keys import public_key_line
    from tests.conftest import start_sshd, stop_sshd

    sshd = start_sshd(tmp / "sshd")
    ui, running = None, ""
    try:
        sshd.authorize(public_key_line())
        make_jobs(tmp / "local", 66)
        for name, n in (("h1", 66), ("h2", 67)):
            make_jobs(tmp / name, n)
            HostStore().save(Host(name=name, hostname="127.0.0.1", port=sshd.port, user=os.environ.get("USER", "root"),
                                  root=str(tmp / name), connect_timeout=10,
                                  env={"GPUJOB_PATH_PREFIX": f"{STAND_INS}{os.pathsep}{Path(sys.executable).parent}"}))
        # the job page shows a real running job (its watcher looks every interval)
        (tmp / "sleeper").mkdir()
        (tmp / "sleeper" / "job.yaml").write_text('name: sleeper\nrun: python -c "import time; time.sleep(900)"\n')
        sub = subprocess.run([sys.executable, "-m", "gpujob.cli", "submit", str(tmp / "sleeper" / "job.yaml"), "--host", "h1",
                              "--json"], capture_output=True, text=True, check=True)
        running = json.loads(sub.stdout)["job_id"]
        ui = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "ui", "--json", "--interval", str(a.interval)],
                              stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        info = json.loads(ui.stdout.readline() if ui.stdout else "{}")
        url, port = info["url"], info["port"]
        token, base = url.split("token=", 1)[1], f"http://127.0.0.1:{port}"
        gpu_seen = None
        while True:  # the first listings (agent install, index) done, and the running job's GPU sampled
            with urllib.request.urlopen(f"{base}/api/jobs?token={token}", timeout=10) as r:
                rows = json.load(r)["jobs"]
            gpu_seen = next((r["gpu"] for r in rows if r["job_id"] == running), None)  # no job page open yet
            if len(rows) >= 200 and gpu_seen is not None:
                break
            time.sleep(0.5)
        loads = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
            for _ in range(a.loads):
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                t0 = time.perf_counter()
                page.goto(url)
                page.wait_for_function("document.querySelectorAll('#jobs tbody tr').length >= 200", timeout=60_000)
                loads.append(time.perf_counter() - t0)
                page.close()
            tabs = browser.new_context()  # tabs of one browser: they share the token's cookie
            for _ in range(a.tabs):
                tabs.new_page().goto(url)
            job = tabs.new_page()
            job.goto(f"{base}/job?host=h1&id={running}")
            before, t0 = stats(base, token), time.monotonic()
            time.sleep(a.seconds)
            after, spent = stats(base, token), time.monotonic() - t0
            shown = job.locator("#meta-state").inner_text()
            browser.close()
    finally:
        if ui is not None:
            ui.terminate()
            ui.wait(timeout=20)
        if running:
            subprocess.run([sys.executable, "-m", "gpujob.cli", "stop", running, "--host", "h1", "--wait", "30"],
                           capture_output=True)
        for name in ("h1", "h2"):
            subprocess.run([sys.executable, "-m", "gpujob.cli", "host", "disconnect", name], capture_output=True)
        stop_sshd(sshd)
    per_min = {h: (after[h] - before[h]) * 60 / spent for h in after}
    print(f"jobs page, all rows drawn: median {statistics.median(loads) * 1000:.0f} ms, "
          f"min {min(loads) * 1000:.0f} ms, max {max(loads) * 1000:.0f} ms over {a.loads} loads")
    print(f"the running job's GPU use in the jobs table before its page opened: {gpu_seen} %")
    print(f"{a.tabs} jobs tabs + 1 job page (h1, state shown: {shown!r}) open {spent:.0f} s, --interval {a.interval:g}:")
    for h, v in per_min.items():
        print(f"  {h}: {v:.1f} agent calls/min")
    print(f"  all hosts: {sum(per_min.values()):.1f}/min; `ls --watch` (2 s): {3 * 60 / WATCH_INTERVAL:.0f}/min per terminal")


if __name__ == "__main__":
    main()
