"""The dashboard as a place to read runs by (issue 36), in Debian's headless chromium through
Playwright, over real jobs on ``local``: TensorBoard-like charts (smoothing, log axis, time axes,
zoom, hover values, grouping), compare on one scale, the runs page at 1400 px with its column
chooser and URL state, the log pane across a resume, and a sweep's Optuna charts.

Each test saves the screenshots docs/dashboard.md shows (1400×900) into ``$GPUJOB_SHOTS_DIR``
(``benchmarks/dashboard/screenshots.py`` points it at docs/img), else into its own folder.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.gpujob.dashboard.test_dashboard import CHROMIUM, FLAGS, ui_server  # noqa: F401 - the fixture, shared
from tests.helpers import needs, status, submit, wait_state, write_job

needs("starlette", "uvicorn", "playwright")

# train/ and eval/ metrics with their wall time, as gpujob's runtime helper writes them
CURVES = """
import json, os, sys, time
scale, steps = float(sys.argv[1]), int(sys.argv[2])
with open(os.environ["GPUJOB_METRICS_FILE"], "a") as m:
    for step in range(1, steps + 1):
        rec = {"t": round(time.time(), 3), "step": step, "train/loss": scale / step + (0.05 if step % 3 == 0 else 0.0)}
        if step % 5 == 0:
            rec["eval/loss"] = scale / step * 1.1
        m.write(json.dumps(rec) + "\\n")
        m.flush()
        time.sleep(0.05)
"""


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"needs {CHROMIUM}: apt-get install chromium (.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("dialog", lambda d: d.accept())
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.js_errors = errors  # type: ignore[attr-defined]
            yield page
        finally:
            browser.close()
    assert not errors, errors  # no script error on any page


def shots_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("GPUJOB_SHOTS_DIR") or tmp_path / "screenshots")
    d.mkdir(parents=True, exist_ok=True)
    return d


def ema(values: list[float], w: float) -> list[float]:
    """TensorBoard's debiased exponential moving average (what the page must draw)."""
    out, last = [], 0.0
    for n, v in enumerate(values, 1):
        last = last * w + (1 - w) * v
        out.append(last / (1 - w ** n))
    return out


def js_fmt(v: float) -> str:
    """The page's fmt() of a float in [0.001, 1000)."""
    return f"{v:.4f}"


def hover(page: Any, metric: str, frac: float) -> dict[str, str]:
    """Moves the mouse over ``metric``'s chart at ``frac`` of its width; the legend's rows as shown."""
    over = page.locator(f'.chart[data-metric="{metric}"] .u-over')
    over.scroll_into_view_if_needed()
    box = over.bounding_box()
    page.mouse.move(box["x"] + box["width"] * frac - 3, box["y"] + box["height"] / 2 - 3)  # a move, wherever it was
    page.mouse.move(box["x"] + box["width"] * frac, box["y"] + box["height"] / 2, steps=2)
    rows = page.locator(f'.chart[data-metric="{metric}"] .u-legend tr.u-series')
    out = {}
    for i in range(rows.count()):
        row = rows.nth(i)
        if row.is_visible():
            out[row.locator(".u-label").inner_text().strip()] = row.locator(".u-value").inner_text().strip()
    return out


def ticks(page: Any, metric: str, axis: int) -> list[str]:
    """The tick labels uPlot drew on the chart's canvas for ``axis`` (0: x, 1: y)."""
    return page.evaluate(f"""() => document.querySelector('.chart[data-metric="{metric}"]').uplot.axes[{axis}]._values""")


def test_charts_smooth_log_time_zoom_and_compare_in_a_browser(tmp_path: Path, ui_server: Callable[..., tuple],  # noqa: F811
                                                               browser_page: Any) -> None:
    from playwright.sync_api import expect

    page, shots = browser_page, shots_dir(tmp_path)
    ids = [submit("local", write_job(tmp_path, f"curves-{i}", CURVES, f"python main.py {scale} 40"))["job_id"]
           for i, scale in enumerate(("1.0", "2.0"))]
    for job in ids:
        wait_state("local", job, ("succeeded",), root=tmp_path / "local-root")
    metrics = [json.loads(line) for line in (tmp_path / "local-root" / "jobs" / ids[0] / "metrics.jsonl").read_text().splitlines()]
    raw = [m["train/loss"] for m in metrics]
    _, info = ui_server("--host", "local", "--interval", "1")
    base = f"http://127.0.0.1:{info['port']}"
    page.goto(info["url"])
    page.goto(f"{base}/job?host=local&id={ids[0]}")
    chart = page.locator('.chart[data-metric="train/loss"]')
    # grouped by prefix: train/ and eval/ each their own section
    expect(page.locator('section[data-group="train"] .chart[data-metric="train/loss"]')).to_be_visible(timeout=30_000)
    expect(page.locator('section[data-group="eval"] .chart[data-metric="eval/loss"]')).to_be_visible()
    expect(chart).to_have_attribute("data-points", "40", timeout=30_000)

    # smoothing: off, the hover shows the raw value at the step under the cursor; at 0.9, the debiased EMA
    page.fill("#smoothing", "0")
    shown = hover(page, "train/loss", 0.5)
    step = int(shown["step"])
    assert shown["train/loss"] == js_fmt(raw[step - 1]), (shown, raw[step - 1])
    page.fill("#smoothing", "0.9")
    expect(page.locator("#smoothing-value")).to_have_text("0.90")
    shown = hover(page, "train/loss", 0.5)
    step = int(shown["step"])
    assert shown["train/loss"] == f"{js_fmt(ema(raw, 0.9)[step - 1])} (raw {js_fmt(raw[step - 1])})", shown

    # log y: the tick labels become decades
    linear = ticks(page, "train/loss", 1)
    page.check("#log-y")
    expect(chart).to_have_attribute("data-y-scale", "log")
    logged = ticks(page, "train/loss", 1)
    assert logged != linear and "0.1" in logged and "1" in logged, (linear, logged)
    assert all(float(v) > 0 for v in logged if v)
    page.evaluate("document.getElementById('charts').scrollIntoView()")
    hover(page, "train/loss", 0.6)  # the values under the cursor, in the picture
    page.screenshot(path=str(shots / "dashboard-job.png"))

    # x = time since the run's first point, then wall time
    page.select_option("#x-axis", "relative")
    expect(chart).to_have_attribute("data-x-mode", "relative")
    expect(chart.locator(".chart-range")).to_contain_text("relative time 0s –")
    assert any(v.endswith("s") for v in ticks(page, "train/loss", 0) if v)
    page.select_option("#x-axis", "wall")
    expect(chart).to_have_attribute("data-x-mode", "wall")
    first_t = metrics[0]["t"]
    assert abs(float(chart.get_attribute("data-x-min") or 0) - first_t) < 1e-3
    shown_first = page.evaluate(f"new Date({first_t} * 1000).toLocaleString()")
    expect(chart.locator(".chart-range")).to_contain_text(shown_first)

    # zoom: drag across the middle of the chart; double-click gives the whole run back
    page.select_option("#x-axis", "step")
    expect(chart).to_have_attribute("data-x-min", "1")
    box = chart.locator(".u-over").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=5)
    page.mouse.move(box["x"] + box["width"] * 0.7, y, steps=5)
    page.mouse.up()
    expect(chart.locator(".chart-range")).to_contain_text("zoomed")
    lo, hi = float(chart.get_attribute("data-x-min") or 0), float(chart.get_attribute("data-x-max") or 0)
    assert 5 < lo < hi < 35, (lo, hi)
    chart.locator(".u-over").dblclick(position={"x": box["width"] / 2, "y": box["height"] / 2})
    expect(chart).to_have_attribute("data-x-min", "1")
    expect(chart).to_have_attribute("data-x-max", "40")
    expect(chart.locator(".chart-range")).not_to_contain_text("zoomed")

    # the settings are this browser's: a reload keeps them
    page.reload()
    expect(page.locator("#log-y")).to_be_checked(timeout=30_000)
    expect(page.locator("#smoothing-value")).to_have_text("0.90")

    # compare: both runs on each metric's one chart (one scale), a value for every run under the cursor
    page.goto(f"{base}/compare?" + "runs=" + ",".join(f"local/{j}" for j in ids))
    expect(page.locator('.chart[data-metric="train/loss"]')).to_be_visible(timeout=30_000)
    page.uncheck("#log-y")
    shown = hover(page, "train/loss", 0.5)
    assert [k for k in shown if k != "step"] == ids, shown  # one host: the job ids name the runs
    assert all(v != "-" for v in shown.values()), shown
    # the shared legend hides a run in every chart at once
    page.click(f'#run-legend [data-run="local/{ids[1]}"]')
    shown = hover(page, "eval/loss", 0.5)
    assert list(shown) == ["step", ids[0]], shown
    page.click(f'#run-legend [data-run="local/{ids[1]}"]')
    # the sparklines of a metric share its one scale across the runs
    sparks = page.locator('#metric-summary tr[data-metric="train/loss"] svg')
    expect(sparks).to_have_count(2)
    assert sparks.nth(0).get_attribute("data-lo") == sparks.nth(1).get_attribute("data-lo")
    assert sparks.nth(0).get_attribute("data-hi") == sparks.nth(1).get_attribute("data-hi")
    # parameters: only what differs, or all of them
    differing = page.locator("#params tbody tr").count()
    page.check("#params-all")
    assert page.locator("#params tbody tr").count() > differing
    expect(page.locator('#params tr[data-param="run"]')).to_contain_text("python main.py 2.0 40")
    page.uncheck("#params-all")
    page.screenshot(path=str(shots / "dashboard-compare.png"))


WIDE = """
import json, os
with open(os.environ["GPUJOB_METRICS_FILE"], "a") as m:
    for step in range(1, 4):
        m.write(json.dumps({"step": step, "loss": 0.5 / step}) + "\\n")
"""


def test_runs_page_fits_1400px_and_remembers_columns_sort_and_filter(tmp_path: Path, ui_server: Callable[..., tuple],  # noqa: F811
                                                                    browser_page: Any) -> None:
    """Three runs differing in ten long arguments: the table fits the window with loss and cost in view;
    the columns picked, the sort and the filter survive a reload."""
    from playwright.sync_api import expect

    page, shots = browser_page, shots_dir(tmp_path)
    ids = []
    # beside the ten that vary: the lr two runs have and disagree on (a default column), a flag two runs
    # share that the third lacks and a setting only one run has (as an HF Trainer's defaults beside a plain
    # script: missing from a run, they do not vary, so no default column, but each can be picked)
    extra = ["--lr 0.1 --warmup 5 --only-here x", "--lr 0.2 --warmup 5", ""]
    for i in range(3):
        args = " ".join(f"--option-{k} /data/experiments/a-rather-long-path-{i}/{k}/shard" for k in range(10))
        args += " " + extra[i]
        ids.append(submit("local", write_job(tmp_path, f"wide-{i}", WIDE, f"python main.py {args}"))["job_id"])
    for job in ids:
        wait_state("local", job, ("succeeded",), root=tmp_path / "local-root")
    _, info = ui_server("--host", "local")
    base = f"http://127.0.0.1:{info['port']}"
    page.goto(info["url"])
    page.goto(f"{base}/runs")
    expect(page.locator("#runs tbody tr")).to_have_count(3, timeout=30_000)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    for col in ("loss", "cost"):
        box = page.locator(f'#runs th[data-key="{col}"]').bounding_box()
        assert box and box["x"] + box["width"] <= 1400, (col, box)
    expect(page.locator('#runs th[data-key="p:lr"]')).to_have_count(1)
    for left in ("p:warmup", "p:only_here"):
        expect(page.locator(f'#runs th[data-key="{left}"]')).to_have_count(0)
        expect(page.locator(f'#runs-column-panel input[data-col="{left}"]')).to_have_count(1)
    # the submitted time whole (seconds and all), none cut by its column
    when = page.locator('#runs td.when')
    expect(when).to_have_count(3)
    for i in range(3):
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", when.nth(i).inner_text()), when.nth(i).inner_text()
    assert page.evaluate("[...document.querySelectorAll('#runs td.when')].every((td) => td.scrollWidth <= td.clientWidth)")
    page.screenshot(path=str(shots / "dashboard-runs.png"))

    # the column chooser: drop Host, add a parameter that was left out; remembered in this browser
    page.click("#runs-columns")
    page.uncheck('#runs-column-panel input[data-col="host"]')
    page.check('#runs-column-panel input[data-col="p:option_9"]')
    expect(page.locator('#runs th[data-key="host"]')).to_have_count(0)
    expect(page.locator('#runs th[data-key="p:option_9"]')).to_have_count(1)
    # sort by a column (descending) and filter the rows shown
    page.click('#runs th[data-key="job_id"]')
    page.click('#runs th[data-key="job_id"]')
    expect(page.locator("#runs tbody tr").first).to_have_attribute("data-key", sorted(ids)[-1])
    page.fill("#runs-filter", "long-path-1/")
    expect(page.locator("#runs tbody tr")).to_have_count(1)
    page.fill("#runs-filter", "wide-")
    expect(page.locator("#runs tbody tr")).to_have_count(3)
    page.reload()
    expect(page.locator("#runs tbody tr")).to_have_count(3, timeout=30_000)
    expect(page.locator("#runs-filter")).to_have_value("wide-")
    expect(page.locator("#runs tbody tr").first).to_have_attribute("data-key", sorted(ids)[-1])
    expect(page.locator('#runs th[data-key="host"]')).to_have_count(0)
    expect(page.locator('#runs th[data-key="p:option_9"]')).to_have_count(1)
    assert "order=-job_id" in page.url and "filter=wide-" in page.url, page.url


# attempt 1 prints a screenful and waits to be stopped; attempt 2 (its checkpoint there) prints another,
# with a tqdm-like bar redrawn in place, and ends
TWO_ATTEMPTS = """
import os, sys, time
ck = os.path.join(os.environ["GPUJOB_CKPT_DIR"], "step-1")
if not os.path.isdir(ck):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    w = EventFileWriter(os.environ["GPUJOB_TB_DIR"])  # HF Trainer's tags, as TensorBoard shows them
    for step in range(1, 4):
        tags = {"train/loss": 1.0 / step, "train/learning_rate": 1e-3, "eval/loss": 1.2 / step}
        w.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in tags.items()])))
    w.close()
    os.makedirs(ck)
    open(os.path.join(ck, "weights.bin"), "w").write("w")
    open(os.path.join(ck, ".gpujob-complete"), "w").close()
    for i in range(80):
        print(f"first {i}", flush=True)
    time.sleep(300)
for i in range(80):
    print(f"second {i}", flush=True)
    time.sleep(0.02)
for p in range(0, 101, 10):
    sys.stderr.write(f"\\rtraining {p:3d}%|{'#' * (p // 10):<10}| {p}/100")
    sys.stderr.flush()
sys.stderr.write("\\n")
print("second done", flush=True)
"""


def test_log_follows_a_resumed_attempt_and_buttons_match_the_state(tmp_path: Path, ui_server: Callable[..., tuple],  # noqa: F811
                                                                   browser_page: Any) -> None:
    from playwright.sync_api import expect

    needs("tensorboard")
    page, shots = browser_page, shots_dir(tmp_path)
    job = submit("local", write_job(tmp_path, "two-attempts", TWO_ATTEMPTS, "python main.py"))["job_id"]
    wait_state("local", job, ("running",), root=tmp_path / "local-root")
    _, info = ui_server("--host", "local", "--interval", "1")
    base = f"http://127.0.0.1:{info['port']}"
    page.goto(info["url"])
    page.goto(f"{base}/job?host=local&id={job}")
    log = page.locator("#log")
    expect(log).to_contain_text("first 79", timeout=30_000)
    # TensorBoard's tags keep their names, so their charts group by prefix (train/, eval/)
    for group, tag in (("train", "train/loss"), ("train", "train/learning_rate"), ("eval", "eval/loss")):
        expect(page.locator(f'section[data-group="{group}"] .chart[data-metric="{tag}"]')).to_be_visible(timeout=30_000)
    expect(page.locator('.chart[data-metric="loss"]')).to_have_count(0)
    expect(page.locator("#meta-state")).to_contain_text("running", timeout=30_000)
    expect(page.locator("#btn-stop")).to_be_visible()  # a running job: stop, no resume
    expect(page.locator("#btn-resume")).to_be_hidden()
    page.click("#btn-stop")
    expect(page.locator("#meta-state")).to_contain_text("stopped", timeout=60_000)
    expect(log).to_contain_text("end of log", timeout=30_000)
    expect(page.locator("#btn-stop")).to_be_hidden()  # a stopped job: resume, no stop
    expect(page.locator("#btn-resume")).to_be_visible()
    expect(page.locator("#btn-pull")).to_be_visible()  # it has a complete checkpoint
    page.click("#btn-resume")
    expect(log).to_contain_text("second done", timeout=60_000)
    # the pane followed the new attempt to its end: its last line is in view
    page.wait_for_function("() => { const l = document.getElementById('log');"
                           " return l.scrollTop + l.clientHeight >= l.scrollHeight - 4; }", timeout=10_000)
    assert page.locator("#log-follow").is_checked()
    # the bar's redraws collapsed to what a terminal shows: its last state, once
    text = log.inner_text()
    assert "training 100%|##########| 100/100" in text and "training  10%" not in text, text[-600:]
    wait_state("local", job, ("succeeded",), root=tmp_path / "local-root")
    expect(page.locator("#meta-state")).to_contain_text("succeeded", timeout=60_000)
    expect(page.locator("#btn-stop")).to_be_hidden()  # a succeeded job: neither
    expect(page.locator("#btn-resume")).to_be_hidden()
    page.screenshot(path=str(shots / "dashboard-log.png"))
    assert status("local", job)["attempt"] == 2


SWEEP_SCRIPT = """
import argparse, json, os, time
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float)
p.add_argument("--batch", type=int)
a = p.parse_args()
with open(os.environ["GPUJOB_METRICS_FILE"], "a") as m:
    for step in range(1, 4):
        m.write(json.dumps({"t": time.time(), "step": step, "loss": (a.lr * 100 + a.batch / 64) / step}) + "\\n")
"""


def test_a_sweeps_history_coordinates_and_importances(tmp_path: Path, ui_server: Callable[..., tuple],  # noqa: F811
                                                      browser_page: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real grid sweep on ``local``, with the ``sweep`` extra alone (scikit-learn hidden: a package of that
    name that fails to import, ahead of any installed one): the compare page of its trials draws Optuna's
    optimisation history, parallel coordinates and the importances ``get_param_importances`` gives."""
    needs("optuna")
    import optuna
    from playwright.sync_api import expect

    page, shots = browser_page, shots_dir(tmp_path)
    shim = tmp_path / "no-sklearn"
    (shim / "sklearn").mkdir(parents=True)
    (shim / "sklearn" / "__init__.py").write_text("raise ImportError('No module named sklearn', name='sklearn')\n")
    no_sklearn = subprocess.run([sys.executable, "-c", "import sklearn"], env=dict(os.environ, PYTHONPATH=str(shim)),
                                capture_output=True, text=True, timeout=60)
    assert no_sklearn.returncode != 0 and "No module named sklearn" in no_sklearn.stderr, no_sklearn.stderr
    d = write_job(tmp_path, "sw", SWEEP_SCRIPT, "python main.py --lr 0.1 --batch 8",
                  sweep={"metric": "loss", "method": "grid", "parallel": 2,
                         "params": {"lr": [0.001, 0.01, 0.03], "batch": [16, 64]}})
    monkeypatch.setenv("PYTHONPATH", str(shim))  # `gpujob sweep` too runs without scikit-learn
    r = run_cli("sweep", str(d), "--hosts", "local", "--name", "sw-dash", "--json", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="sw-dash", storage=f"sqlite:///{tmp_path / 'state' / 'sweeps.sqlite'}")
    want = optuna.importance.get_param_importances(study, evaluator=optuna.importance.PedAnovaImportanceEvaluator())
    _, info = ui_server("--host", "local", pythonpath=str(shim))
    base = f"http://127.0.0.1:{info['port']}"
    page.goto(info["url"])
    page.goto(f"{base}/runs")
    expect(page.locator("#runs tbody tr")).to_have_count(6, timeout=30_000)
    # the parameters that vary are the default columns (a grid's lr and batch), no column needs picking
    for p in ("lr", "batch"):
        expect(page.locator(f'#runs th[data-key="p:{p}"]')).to_have_count(1)
    page.click('#runs-columns')
    page.check('#runs-column-panel input[data-col="sweep"]')
    page.keyboard.press("Escape")
    expect(page.locator("#runs-column-panel")).to_be_hidden()
    with page.expect_response(lambda resp: "/api/sweep?" in resp.url) as sweep_answer:
        page.locator('#runs td a[href*="sweep=sw-dash"]').first.click()
    assert sweep_answer.value.status == 200, sweep_answer.value.text()
    expect(page.locator("#sweep-history canvas").first).to_be_visible(timeout=60_000)
    expect(page.locator("#coords-svg polyline")).to_have_count(6)
    rows = page.locator("#sweep-importances .imp-row")
    expect(rows).to_have_count(2)
    for p, v in want.items():
        expect(page.locator(f'#sweep-importances .imp-row[data-param="{p}"] .imp-val')).to_have_text(f"{v:.3f}")
    best = page.evaluate("document.querySelector('#sweep-history').querySelector('.u-legend') !== null")
    assert best
    page.evaluate("document.getElementById('sweep').scrollIntoView()")
    page.screenshot(path=str(shots / "dashboard-sweep.png"))
