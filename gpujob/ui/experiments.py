"""``runs``, ``compare``, ``rerun`` and ``sweep`` drawn: tables of the run ledger, runs side by side."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpujob.ui.output import STATE_STYLE, console

if TYPE_CHECKING:
    from gpujob.api import results

MAX_PARAM_COLS = 4


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _when(t: float | None) -> str:
    return time.strftime("%m-%d %H:%M", time.localtime(t)) if t else "-"


def exported(res: Any) -> None:
    """``runs export --mlflow``: how many runs went, how many were there already."""
    doc = res.to_json()
    print(f"{doc['exported']} run(s) exported to MLflow at {doc['mlflow']} ({doc['points']} new point(s)); "
          f"{doc['unchanged']} already there" + (f"; {doc['left']} left deleted there" if doc.get("left") else ""))
    import sys

    from gpujob.ui.neutral import clean
    from gpujob.usecases.lab.export import refusal_line

    for r in doc.get("refused") or []:  # the server's words: through the one sanitiser
        print(f"gpujob: {clean(refusal_line(r))}", file=sys.stderr)


def runs_table(res: results.RunList | Any) -> None:
    """One row per run: id, host, state, the parameters that vary among the rows shown, the sort metric, cost.
    Plain text in columns (``plaintable``): rich's table would be most of what ``runs`` costs."""
    import sys

    from gpujob.ui.plaintable import Col, colour, styled, table

    doc = res.to_json()
    rows = doc["runs"]
    if not rows:
        print("no runs match: every job submitted from here is one (gpujob submit job.yaml); with --name, --where "
              "or --sweep, gpujob runs alone lists them all")
        return
    keys: dict[str, set[str]] = {}
    for r in rows:
        for k, v in (r.get("params") or {}).items():
            keys.setdefault(k, set()).add(repr(v))
    varying = [k for k, vals in keys.items() if len(vals) > 1 or len(rows) == 1][:MAX_PARAM_COLS]
    metric = (doc.get("sort") or "").lstrip("-") or next((r.get("loss_key") for r in rows if r.get("loss_key")), None) \
        or next((k for r in rows for k in (r.get("final") or {}) if "loss" in k), None)
    # at a narrow width the run, its state, the metric's best and the cost stay; its last value, the
    # host, the parameters and the date give way whole (the footnote names them), never cut to "0.0…"
    figures = [Col(f"BEST {metric.upper()}", rank=1), Col(f"LAST {metric.upper()}", rank=4)] if metric else []
    cols = [Col("RUN", "id"), Col("HOST", "name", 3), Col("STATE"), Col("STARTED", rank=5),
            *(Col(k, "name", 4) for k in varying), *figures, Col("COST", rank=2)]
    cells, styles = [], []
    for r in rows:
        shown: list[str] = []
        if metric:  # the best as the run's direction says (docs/experiments.md), and the newest value
            last = (r.get("final") or {}).get(metric, (r.get("params") or {}).get(metric))
            best = (r.get("best") or {}).get(metric)
            shown = [_fmt(last if best is None else best), _fmt(last)]
        cost = f"{r['cost']:.2f} {r.get('currency') or ''}".strip() if r.get("cost") is not None else "-"
        cells.append([r["job_id"], r.get("host") or "-", r.get("state") or "?", _when(r.get("submitted_at")),
                      *(_fmt((r.get("params") or {}).get(k)) for k in varying), *shown, cost])
        styles.append(["", "", STATE_STYLE.get(r.get("state") or "", "white")])
    sys.stdout.write(table(cols, cells, styles))
    if doc["total"] > doc["shown"]:
        print(styled(f"{doc['shown']} of {doc['total']} runs (--limit 0: all)", "dim", colour()))


def comparison(res: results.Comparison) -> None:
    """What differs, then the metrics side by side, then a sparkline of each run's main curve
    (padded text, as ``runs``: rich's table would be a third of what compare costs)."""
    import shutil
    import sys

    from gpujob.ui.neutral import clean
    from gpujob.ui.plaintable import Col, colour, middle, sparkline, styled, table, unique_tail

    doc = res.to_json()
    runs = doc["runs"]
    on = colour()
    cells: list[list[str]] = []
    styles: list[list[str]] = []

    def section(title: str, values: dict[str, list[Any]]) -> None:
        if values:
            cells.append([title, *([""] * len(runs))])
            styles.append(["dim"])
        for k, vals in values.items():
            cells.append([k, *(_fmt(v) for v in vals)])
            styles.append(["bold"])

    section("differs", {**doc["params"], **doc["code"], **doc["env"]})
    section("last", doc["final"])
    ways = doc.get("directions") or {}
    section("best", {f"{k} ({'max' if ways.get(k) == 'maximize' else 'min'})": v for k, v in doc["best"].items()})
    if any(v is not None for v in doc.get("cost") or []):
        money = doc.get("currency") or [None] * len(runs)
        cells.append(["cost", *(f"{c:.2f} {m or ''}".strip() if isinstance(c, (int, float)) else "-"
                                for c, m in zip(doc["cost"], money))])
        styles.append(["bold"])
    # one column per run, none dropped: run ids shorten to their unique end before a value is cut
    sys.stdout.write(table([Col(""), *(Col(r["job_id"]) for r in runs)], cells, styles))
    if not (doc["params"] or doc["code"] or doc["env"]):
        print(styled("same parameters, code and environment", "dim", on))
    same = doc.get("same_params") or {}
    if same:
        print(styled(clean("same: " + ", ".join(f"{k}={_fmt(v)}" for k, v in same.items())), "dim", on))
    key = doc.get("loss_key") or next(iter(doc.get("series") or {}), None)
    if key and key in doc["series"]:
        print(styled(clean(key), "bold", on))
        ids = [clean(r["job_id"]) for r in runs]
        room = shutil.get_terminal_size((80, 24)).columns
        name_w = min(max(len(i) for i in ids), max(8, room - 2 - 1 - 40))  # the line fits: the id gives first
        for i, pts in zip(ids, doc["series"][key]):
            spark = sparkline([p[1] for p in pts if isinstance(p[1], (int, float))], max(8, min(40, room - 3 - name_w)))
            print(f"  {middle(i, name_w, unique_tail(ids, i)):<{name_w}} {spark}")
    if doc.get("plot"):
        print(f"curves: {clean(doc['plot'])}")


def compare_plot(doc: dict[str, Any], out: Path) -> list[str]:
    """The runs' curves overlaid, one panel per metric, to the PNG ``out``."""
    from gpujob.ui.plot import pyplot

    plt = pyplot()
    keys = [k for k, per in doc["series"].items() if any(len(p) > 1 for p in per)][:4] or list(doc["series"])[:1]
    fig, axes = plt.subplots(max(1, len(keys)), 1, figsize=(8, 2.6 * max(1, len(keys)) + 0.6), squeeze=False)
    for ax, k in zip(axes[:, 0], keys):
        for r, pts in zip(doc["runs"], doc["series"][k]):
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=r["job_id"])
        ax.set_ylabel(k)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[-1, 0].set_xlabel("step")
    fig.set_layout_engine("constrained")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(str(out), dpi=110)
    plt.close(fig)
    return keys


def reran(res: results.RerunResult) -> None:
    from gpujob.ui.jobs import submitted

    submitted(res)
    how = "restored from the ledger" if res.restored else "the job file's folder"
    console().print(f"  rerun of {res.parent}; code {res.code_hash or '?'} ({how})")


def sweep_report(res: results.SweepReport) -> None:
    """The trials (best first), the sweep's state and what it spent."""
    import sys

    from gpujob.ui.plaintable import Col, table

    doc = res.to_json()
    c = console()
    metric = doc.get("metric") or "value"
    pkeys = list(dict.fromkeys(k for tr in doc["trials"] for k in (tr.get("params") or {})))
    cols = [Col("#"), Col("RUN", "id"), Col("STATE"), *(Col(k, "name", 3) for k in pkeys), Col(metric.upper(), rank=1),
            Col("STEPS", rank=2)]
    cells = [[str(tr.get("number")), tr.get("job_id") or "-", tr.get("state") or "?",
              *(_fmt((tr.get("params") or {}).get(k)) for k in pkeys), _fmt(tr.get("value")), _fmt(tr.get("steps"))]
             for tr in doc["trials"]]
    styles = [["", "", STATE_STYLE.get(r[2], "white")] for r in cells]
    sys.stdout.write(table(cols, cells, styles, title=f"sweep {doc['sweep']} ({doc['state']})"))
    best = doc.get("best")
    if best:
        c.print(f"best: trial {best['number']} ({best.get('job_id')}) {metric} = {_fmt(best.get('value'))} "
                f"with {_esc(', '.join(f'{k}={_fmt(v)}' for k, v in (best.get('params') or {}).items()))}")
    spent = doc.get("spent") or {}
    parts = [f"{spent['cost']:.2f} {spent.get('currency') or ''}".strip() if spent.get("cost") is not None else None,
             f"{spent['gpu_hours']:.3f} GPU-h" if spent.get("gpu_hours") is not None else None,
             f"{spent['steps']} steps" if spent.get("steps") is not None else None]
    if any(parts):
        c.print("spent: " + ", ".join(p for p in parts if p))
    if doc.get("ended"):
        c.print(f"ended: {_esc(doc['ended'])}")
