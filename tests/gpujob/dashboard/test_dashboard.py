"""``gpujob ui`` end to end: the real server over real jobs on ``local`` and the test sshd, in Debian's
headless chromium driven by Playwright (no browser download; nothing leaves loopback).

Screenshots of every page land in the test's folder (``<tmp>/screenshots``), the CI artifact.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import needs, status, submit, wait_state, write_job

needs("starlette", "uvicorn")
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]

# Metrics every ``delay`` s; its first line is markup that must reach the page as text.
TICKER = """
import json, os, sys, time
n, delay = int(sys.argv[1]), float(sys.argv[2])
print("<b>bold</b><script>window.pwned=1</script><img src=x onerror='window.pwned=2'>", flush=True)
with open(os.environ["GPUJOB_METRICS_FILE"], "a") as m:
    for step in range(1, n + 1):
        m.write(json.dumps({"step": step, "loss": 1.0 / step, "lr": float(sys.argv[3])}) + "\\n")
        m.flush()
        print(f"step {step}", flush=True)
        if step == 5:  # one complete checkpoint, for the pull button (a resumed run writes it again)
            ck = os.path.join(os.environ["GPUJOB_CKPT_DIR"], "step-5")
            os.makedirs(ck, exist_ok=True)
            open(os.path.join(ck, "weights.bin"), "w").write("w")
            open(os.path.join(ck, ".gpujob-complete"), "w").close()
        time.sleep(delay)
"""


def start_ui(cwd: Path, *extra: str, pythonpath: str = "") -> tuple[subprocess.Popen, dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), pythonpath) if p))
    p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "ui", "--json", *extra], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, stdin=subprocess.DEVNULL, cwd=str(cwd))
    line = p.stdout.readline() if p.stdout else ""
    if not line:
        p.kill()
        raise AssertionError(f"gpujob ui printed nothing: {p.communicate(timeout=10)[1][-2000:]}")
    return p, json.loads(line)


@pytest.fixture
def ui_server(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen, dict]]]:
    """Starts ``gpujob ui --json ARGS`` (``pythonpath``: folders after the repo's); every server started
    is ended with the test."""
    procs: list[subprocess.Popen] = []

    def start(*extra: str, pythonpath: str = "") -> tuple[subprocess.Popen, dict]:
        p, info = start_ui(tmp_path, *extra, pythonpath=pythonpath)
        procs.append(p)
        return p, info

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def http_status(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}, method=method), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_token_and_host_header_are_required(ui_server: Callable[..., tuple]) -> None:
    _, info = ui_server("--host", "local")
    url, port = info["url"], info["port"]
    token = url.split("token=", 1)[1]
    base = f"http://127.0.0.1:{port}"
    assert http_status(url) == 200
    assert http_status(f"{base}/api/jobs?token={token}") == 200
    assert http_status(f"{base}/") == 403
    assert http_status(f"{base}/api/jobs") == 403
    assert http_status(f"{base}/api/jobs?token={token[:-1]}x") == 403
    assert http_status(f"{base}/static/app.js") == 403
    # a POST needs the token in its header: a page elsewhere cannot send one with the cookie alone
    assert http_status(f"{base}/api/job/stop?host=local&id=x&token={token}", method="POST") == 403
    # DNS rebinding: another name for 127.0.0.1 is refused even with the token
    assert http_status(f"{base}/api/jobs?token={token}", {"Host": f"evil.example:{port}"}) == 403
    # clickjacking: a page on another localhost port (a host's "TensorBoard" through `gpujob tunnel`)
    # is the same site, so the cookie goes with it; no answer may be framed or leak the token onward
    with urllib.request.urlopen(url, timeout=10) as r:
        page = r.headers
    try:
        urllib.request.urlopen(f"{base}/api/jobs", timeout=10)
    except urllib.error.HTTPError as e:
        refused = e.headers
    for h in (page, refused):
        assert h["X-Frame-Options"] == "DENY" and "frame-ancestors 'none'" in h["Content-Security-Policy"], h
        assert h["Referrer-Policy"] == "no-referrer" and h["X-Content-Type-Options"] == "nosniff", h
    assert page["Cache-Control"] == "no-store", page  # the page holds the token
    # the browser sends 127.0.0.1's cookies to every port, a host's TensorBoard behind `gpujob tunnel`
    # too: the cookie is a session secret, never the token, and it opens no POST
    session = page["Set-Cookie"].split("gpujob_ui=", 1)[1].split(";", 1)[0]
    assert session and token not in page["Set-Cookie"], page["Set-Cookie"]
    assert http_status(f"{base}/api/jobs", {"Cookie": f"gpujob_ui={session}"}) == 200
    assert http_status(f"{base}/api/job/stop?host=local&id=x", {"X-Token": session}, method="POST") == 403
    assert http_status(f"{base}/api/job/stop?host=local&id=x", {"X-Token": token}, method="POST") != 403


def test_tabs_share_one_poll_per_host(ui_server: Callable[..., tuple]) -> None:
    """Ten open event streams (ten tabs) make no agent call of their own: the host's poller makes them all."""
    import http.client
    import time

    proc, info = ui_server("--host", "local", "--interval", "1")
    token = info["url"].split("token=", 1)[1]
    conns = []
    for _ in range(10):
        c = http.client.HTTPConnection("127.0.0.1", info["port"], timeout=10)
        c.request("GET", f"/api/events?token={token}")
        r = c.getresponse()
        assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.readline().startswith(b"event: jobs")
        conns.append(c)
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{info['port']}/api/stats?token={token}", timeout=10) as r:
        before = json.load(r)["calls"]["local"]
    time.sleep(3)
    with urllib.request.urlopen(f"http://127.0.0.1:{info['port']}/api/stats?token={token}", timeout=10) as r:
        after = json.load(r)["calls"]["local"]
    assert after - before <= (time.monotonic() - t0) / 1 + 1  # at most one `ls` per interval
    # Ctrl-C with the streams open: the server leaves at once, quietly
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=15)
    for c in conns:
        c.close()
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]  # 130: as every command on Ctrl-C


def sse_events(port: int, path: str, until: str, headers: dict[str, str] | None = None) -> list[tuple[str, dict]]:
    """The (event, data) pairs of an event stream, read until an event named ``until``."""
    import http.client

    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    assert r.status == 200, r.read()[:300]
    out, name = [], ""
    try:
        for raw in r:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                out.append((name, json.loads(line[6:])))
                if name == until:
                    return out
    finally:
        c.close()
    raise AssertionError(f"the stream ended before {until!r}: {out}")


def test_job_stream_resumes_the_log_at_its_byte(tmp_path: Path, ui_server: Callable[..., tuple]) -> None:
    """A reconnect's Last-Event-ID (a line's byte offset) starts the log at that line, as ``tail -f`` does."""
    job = submit("local", write_job(tmp_path, "dash-log", "for i in range(5): print(f'line {i}')\n",
                                    "python main.py"))["job_id"]
    wait_state("local", job, ("succeeded",), root=tmp_path / "local-root")
    _, info = ui_server("--host", "local")
    token = info["url"].split("token=", 1)[1]
    path = f"/api/job/stream?token={token}&host=local&id={job}"
    lines = [d for e, d in sse_events(info["port"], path, "end") if e == "line"]
    texts = [d["line"] for d in lines]
    assert [t for t in texts if t.startswith("line ")] == [f"line {i}" for i in range(5)]
    third = next(d for d in lines if d["line"] == "line 2")
    again = [d for e, d in sse_events(info["port"], path, "end", {"Last-Event-ID": str(third["offset"])})
             if e == "line"]
    assert again[0] == third and [d["line"] for d in again[:3]] == ["line 2", "line 3", "line 4"]


def test_a_host_that_does_not_answer_is_named(ui_server: Callable[..., tuple]) -> None:
    """A profile whose instance is gone: the page names it and why, the other hosts' jobs still come."""
    from gpujob.config.hosts import Host, HostStore
    from tests.conftest import free_port
    from tests.helpers import wait_for

    off = time.time() - 9.5 * 86400  # found powered off 9.5 days ago: AutoDL releases it 15 days after
    HostStore().save(Host(name="gone", hostname="127.0.0.1", port=free_port(), user="root", connect_timeout=2,
                          preset="autodl", powered_off_at=off))
    _, info = ui_server("--interval", "1")
    assert info["hosts"] == ["local", "gone"]
    token = info["url"].split("token=", 1)[1]

    def listing() -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{info['port']}/api/jobs?token={token}", timeout=10) as r:
            return json.load(r)

    wait_for(lambda: "gone" in listing()["errors"], 30, "the error of host 'gone'")
    assert "127.0.0.1" in listing()["errors"]["gone"] and "local" not in listing()["errors"]
    assert listing()["disks"]["gone"]["left"] == "5 days" and listing()["disks"]["gone"]["released_at"] == off + 15 * 86400


def test_ui_without_the_extra_says_how_to_get_it(tmp_path: Path) -> None:
    """Where Starlette is not installed (a stand-in package that fails to import), a message, no traceback."""
    (tmp_path / "shim" / "starlette").mkdir(parents=True)
    (tmp_path / "shim" / "starlette" / "__init__.py").write_text("raise ImportError('no', name='starlette')\n")
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{tmp_path / 'shim'}")
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", "ui"], capture_output=True, text=True, env=env, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "pip install 'gpujob[ui]'" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_compare_shows_only_the_parameters_that_differ() -> None:
    from gpujob.dashboard import compare as cmp

    runs = [{"key": f"h/{i}", "params": {"host": "h", "run": "python t.py", **p}, "series": {}}
            for i, p in enumerate([{"env.LR": 0.1}, {"env.LR": 0.2, "gpus": 2}])]
    cmp.SOURCES["fixed"] = lambda hub, keys: [r for r in runs if r["key"] in keys]  # how a ledger plugs in
    try:
        doc = cmp.compare(None, ["h/0", "h/1"], source="fixed")
    finally:
        del cmp.SOURCES["fixed"]
    assert doc["differing"] == ["env.LR", "gpus"]
    assert [r["params"] for r in doc["runs"]] == [{"env.LR": 0.1, "gpus": None}, {"env.LR": 0.2, "gpus": 2}]
    assert cmp.flatten({"env": {"A": 1}, "run": "x"}) == {"env.A": 1, "run": "x"}


def test_ui_refuses_unknown_host_with_a_message() -> None:
    from tests.conftest import run_cli

    r = run_cli("ui", "--host", "nosuch", timeout=60)
    assert r.returncode != 0 and "unknown host" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_dashboard_in_a_browser(ssh_host: str, tmp_path: Path, ui_server: Callable[..., tuple]) -> None:
    needs("playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"needs {CHROMIUM}: apt-get install chromium (.ci/run does)")
    from playwright.sync_api import expect, sync_playwright

    shots = tmp_path / "screenshots"
    shots.mkdir()
    running = submit("local", write_job(tmp_path, "dash-tick", TICKER, "python main.py 2000 0.2 0.001"))["job_id"]
    remote = submit(ssh_host, write_job(tmp_path, "dash-box", TICKER, "python main.py 30 0 0.003"))["job_id"]
    wait_state(ssh_host, remote, ("succeeded",), timeout=60)
    _, info = ui_server("--interval", "1")
    base = f"http://127.0.0.1:{info['port']}"

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("dialog", lambda d: d.accept())
            # the jobs table: both hosts' jobs, live
            page.goto(info["url"])
            expect(page.locator(f'tr[data-key="local/{running}"]')).to_be_visible(timeout=20_000)
            expect(page.locator(f'tr[data-key="{ssh_host}/{remote}"] td.state')).to_have_text("succeeded", timeout=20_000)
            page.screenshot(path=str(shots / "jobs.png"), full_page=True)
            page.fill("#filter", ssh_host)  # filter: only the sshd host's job is left
            expect(page.locator("#jobs tbody tr")).to_have_count(1)
            page.fill("#filter", "")
            page.click('th[data-key="job_id"]')  # sort by job: dash-box before dash-tick
            expect(page.locator("#jobs tbody tr").first).to_have_attribute("data-key", f"{ssh_host}/{remote}")
            page.click('th[data-key="job_id"]')
            expect(page.locator("#jobs tbody tr").first).to_have_attribute("data-key", f"local/{running}")

            # compare (ticked on the jobs page): both runs overlaid, the parameters that differ in a table
            for key in (f"local/{running}", f"{ssh_host}/{remote}"):
                page.check(f'tr[data-key="{key}"] input[type=checkbox]')
            page.click("#compare")
            expect(page.locator('.chart[data-metric="loss"]')).to_be_visible(timeout=30_000)
            params = page.locator("#params")
            expect(params).to_contain_text("host")
            expect(params).to_contain_text("python main.py 30 0 0.003")
            page.screenshot(path=str(shots / "compare.png"), full_page=True)

            # the job page: the curve gains points without a reload; the job's markup is shown as text
            page.goto(f"{base}/job?host=local&id={running}")
            chart = page.locator('.chart[data-metric="loss"]')
            expect(chart).to_be_visible(timeout=20_000)
            first = float(chart.get_attribute("data-last-step") or 0)
            page.wait_for_function(f"""() => Number(document.querySelector('.chart[data-metric="loss"]')
                                    .dataset.lastStep) > {first}""", timeout=20_000)
            expect(page.locator("#log")).to_contain_text("<script>window.pwned=1</script>", timeout=20_000)
            assert page.evaluate("window.pwned") is None
            page.screenshot(path=str(shots / "job.png"), full_page=True)

            # stop from the job page ends the job
            page.goto(f"{base}/job?host=local&id={running}")
            expect(page.locator("#meta-state")).to_contain_text("running", timeout=20_000)
            page.click("#btn-stop")
            expect(page.locator("#meta-state")).to_contain_text("stopped", timeout=60_000)
            expect(page.locator("#checkpoints")).to_contain_text("step-5")
            page.screenshot(path=str(shots / "job-stopped.png"), full_page=True)

            # pull --latest, then resume, from the same page
            page.click("#btn-pull")
            expect(page.locator("#action-result")).to_contain_text("pull: ", timeout=30_000)
            assert (tmp_path / "gpujob-pulls" / running / "ckpt" / "step-5" / "weights.bin").is_file()
            expect(page.locator("#checkpoints")).to_contain_text(str(tmp_path / "gpujob-pulls"), timeout=20_000)
            page.click("#btn-resume")
            expect(page.locator("#meta-state")).to_contain_text("running", timeout=30_000)
            expect(page.locator("#log")).to_contain_text("attempt 2 started", timeout=30_000)  # the log follows again

            # without the token: refused
            other = browser.new_page()
            resp = other.goto(f"{base}/")
            assert resp is not None and resp.status == 403
        finally:
            browser.close()
    assert status("local", running)["attempt"] == 2  # resumed
    assert {p.name for p in shots.iterdir()} == {"jobs.png", "job.png", "compare.png", "job-stopped.png"}


def test_carriage_return_redraws_show_as_a_terminal_leaves_them() -> None:
    """A tqdm or Lightning bar redraws itself after a carriage return: the page shows the line as a
    terminal leaves it (the last redraw, over what was longer before it), never the redraws strung together."""
    from gpujob.dashboard.terminal import shown as as_terminal_shows

    bar = "".join(f"\r{p:3d}%|{'#' * (p // 10):<10}| {p}/100" for p in range(0, 101, 10))
    assert as_terminal_shows(bar) == "100%|##########| 100/100"
    assert as_terminal_shows(bar + "\r") == "100%|##########| 100/100"  # a trailing return changes nothing
    assert as_terminal_shows("epoch 1: loss 0.51234\rdone") == "doneh 1: loss 0.51234"  # as a terminal shows it
    assert as_terminal_shows("plain line") == "plain line"
    # a hostile line of a million returns after a long text is one pass, not a million copies of the text
    assert as_terminal_shows("x" * 500_000 + "\r" * 1_000_000) == "x" * 500_000


# A job's output with what a terminal takes as commands: colours, a title (OSC), tqdm's redraws (\r, ESC[K) and
# nested bar (ESC[A), other C0 and C1 controls; a metric named with an escape; an error holding one.
CONTROLS = r'''
import json, os, sys
out = sys.stdout
out.write("\x1b]0;a title\x07\x1b[1;32mgreen words\x1b[0m plain\n")
for i in range(11):
    out.write("\r\x1b[K" + f"{i * 10:3d}%|{chr(9608) * i:<10}| {i}/10 [\x1b[33mrunning\x1b[0m]")
out.write("\n")
out.write("outer 1/2\n inner 5/5\x1b[A\router 2/2\n")
out.write("controls:\x00\x07\x0b\x0c\x0e\x1f\x7f\u0085\u009b31m c1 end back:abc\x08X\n")
# tqdm's nested bars as it writes them (position=1, leave=False): the inner one below, moving up after each draw
out.write("\repoch 0/2")
for e in range(1, 3):
    for i in range(4):
        out.write(f"\n\rinner {i}/3\x1b[A")
    out.write("\n\r" + " " * 12 + f"\x1b[A\repoch {e}/2")
out.write("\nafter the bars\n")
with open(os.environ["GPUJOB_METRICS_FILE"], "a") as m:
    m.write(json.dumps({"step": 1, "loss\x1b[31m": 0.5, "acc\x07": 0.9}) + "\n")
out.flush()
raise RuntimeError("\x1b[31mboom\x1b[0m\x07 at the end")
'''
# what the page must never hold raw: C0 but \n and \t, DEL, C1 (ESC among them)
RAW_CONTROL = r"/[\x00-\x08\x0b-\x1f\x7f-\x9f]/"


@pytest.mark.slow
def test_control_characters_never_reach_the_page(tmp_path: Path, ui_server: Callable[..., tuple]) -> None:
    """A job printing escape sequences, ``\\r`` bars and other controls: the job page and the jobs page hold no
    control character in their text; the bar shows its last redraw, the rest what a terminal shows or a picture."""
    needs("playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"needs {CHROMIUM}: apt-get install chromium (.ci/run does)")
    from playwright.sync_api import expect, sync_playwright

    job = submit("local", write_job(tmp_path, "dash-ctl", CONTROLS, "python main.py"))["job_id"]
    # a job that fails before it starts (its setup fails): no attempt, so no diagnosis of one
    unstarted = submit("local", write_job(tmp_path, "dash-nosetup", "print('never')\n", "python main.py",
                                          setup="exit 3"))["job_id"]
    wait_state("local", job, ("failed",), root=tmp_path / "local-root")
    wait_state("local", unstarted, ("failed",), root=tmp_path / "local-root")
    _, info = ui_server("--host", "local", "--interval", "1")
    base = f"http://127.0.0.1:{info['port']}"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{base}/job?host=local&id={job}&token={info['url'].split('token=', 1)[1]}")
            log = page.locator("#log")
            expect(log).to_contain_text(" 10/10 [running]", timeout=30_000)  # the bar's last redraw
            expect(page.locator("#diagnosis")).to_contain_text("boom", timeout=30_000)
            expect(page.locator('.chart[data-metric="loss"]')).to_be_visible(timeout=30_000)
            text = log.inner_text()
            assert "100%|██████████| 10/10 [running]" in text, text
            assert "0%|" not in text.replace("100%|", ""), text  # the earlier redraws are overwritten
            # each row as a terminal leaves it: a move up writes on the row above, the next line goes on below
            assert "green words plain" in text and "outer 2/2\ncontrols:" in text and "outer 1/2" not in text, text
            assert "abX\nepoch 2/2\nafter the bars" in text and "epoch 1/2" not in text and "inner" not in text, text
            expect(page.locator("#diagnosis")).to_contain_text("gpujob tail")  # the remedy, as `status` says it
            assert "controls:␀␇␋␌␎␟␡\\x85 c1 end back:abX" in text, text  # pictures; a backspace steps back
            body = page.evaluate("document.body.innerText")
            assert not page.evaluate(f"{RAW_CONTROL}.test(document.body.innerText)"), repr(body)
            page.goto(info["url"])  # the jobs page: its last line and diagnosis
            expect(page.locator(f'tr[data-key="local/{job}"] td.state')).to_have_text("failed", timeout=20_000)
            expect(page.locator(f'tr[data-key="local/{job}"] td.diag')).to_contain_text("boom")
            body = page.evaluate("document.body.innerText")
            assert not page.evaluate(f"{RAW_CONTROL}.test(document.body.innerText)"), repr(body)
            title = page.locator(f'tr[data-key="local/{job}"] td.diag').get_attribute("title") or ""
            assert not any(ord(c) < 32 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F for c in title), repr(title)
            # the job that never started: why, in the agent's words, on both pages
            why = "setup failed with exit code 3"
            expect(page.locator(f'tr[data-key="local/{unstarted}"] td.diag')).to_contain_text(why, timeout=20_000)
            page.goto(f"{base}/job?host=local&id={unstarted}")
            expect(page.locator("#diagnosis")).to_contain_text(why, timeout=30_000)
        finally:
            browser.close()


def test_escape_sequences_show_as_a_terminal_leaves_them() -> None:
    """Colours and titles dropped, erases and moves replayed on the line, a move up written on the row above,
    what is left of controls as pictures; a hostile line of moves and erases is one pass."""
    from gpujob.dashboard.terminal import CONTROL, shown

    assert shown("\x1b[1;31mred\x1b[0m \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x1b[?25lok") == "red link ok"
    assert shown("a long text\r\x1b[Kshort") == "short" and shown("abc\x1b[2Dx") == "axc"
    assert shown("  5/5 inner\x1b[A\router 2/2") == "outer 2/2\n  5/5 inner"  # tqdm's nested bar
    assert shown("\x1b[32m" + "\r\x1b[2K".join(f"{i}/9" for i in range(10))) == "9/9"
    assert shown("bell\x07 nul\x00 del\x7f c1\x85 esc\x1b") == "bell␇ nul␀ del␡ c1\\x85 esc␛"
    assert shown("name\tand\nlines") == "name\tand\nlines"  # tab and newline pass
    for hostile in ("\x1b[65536Gx\r\x1b[K" * 20_000, "\x1b[65536Gx" + "\x1b[1K" * 50_000, "\x1b[A" * 50_000 + "y"):
        assert not CONTROL.search(shown(hostile))


def test_a_logs_lines_write_on_the_rows_above_as_a_terminal_does() -> None:
    """Across lines: tqdm's nested bar moves up and writes again, so the page replaces the rows it showed
    (``rewrite``) instead of adding each redraw; a move down stops at the last row; hostile lines stay bounded."""
    from gpujob.dashboard.terminal import CONTROL, MAX_ROWS, LogScreen

    screen, page = LogScreen(), list[str]()

    def feed(line: str) -> tuple[int, list[str]]:
        rewrite, rows = screen.feed(line)
        del page[len(page) - rewrite:]
        page.extend(rows)
        return rewrite, rows

    assert feed("plain") == (0, ["plain"]) and feed("") == (0, [""])
    assert feed("\repoch 0/2") == (0, ["epoch 0/2"])
    assert feed("\rinner 0/3\x1b[A") == (0, ["inner 0/3"])  # drawn below, the cursor back on the bar above
    assert feed("\rinner 1/3\x1b[A") == (1, ["inner 1/3"])  # the newline goes down onto it: written again
    assert feed("\r" + " " * 9 + "\x1b[A\repoch 1/2") == (2, ["epoch 1/2", " " * 9])  # cleared, the bar above redrawn
    assert feed("done") == (1, ["done     "])
    assert page == ["plain", "", "epoch 1/2", "done     "]
    assert feed("x\x1b[5By") == (0, ["xy"])  # no row below the last: a move down stops there
    for hostile in ("\x1b[B" * 50_000 + "z", "\x1b[A" * 50_000 + "y", "x" * 1_000_000, "\x1b[65536Gx" + "\x1b[1K" * 50_000):
        rewrite, rows = feed(hostile)
        assert len(rows) <= MAX_ROWS and all(len(r) <= 1 << 14 and not CONTROL.search(r) for r in rows)
