"""``gpujob cost`` drawn: one row per job, then one total per host."""

from __future__ import annotations

from gpujob.bundle import import_remote
from gpujob.usecases.jobs.cost import CostSummary

format_duration = import_remote("core.protocol").format_duration


def cost_table(doc: CostSummary) -> str:
    """The ``cost --json`` document as a table (plaintable's rule: the job and the money stay)."""
    from gpujob.ui.plaintable import Col, table

    cols = [Col("JOB", "id"), Col("HOST", "name", 2), Col("STATE", rank=3), Col("ELAPSED", rank=4), Col("COST"),
            Col("PROJECTED", rank=1)]
    cells: list[list[str]] = []
    styles: list[list[str]] = []
    for j in doc["jobs"]:
        cur = j.get("currency") or ""
        cells.append([j["job_id"] or "?", j["host"] or "-", j["state"] or "?", format_duration(j.get("elapsed_s")),
                      f"{j['cost']:.2f} {cur}".strip() if j.get("cost") is not None else "-",
                      f"{j['projected_cost']:.2f} {cur}".strip() if j.get("projected_cost") is not None else "-"])
        styles.append([])
    for name, h in doc["hosts"].items():
        cells.append([f"{name} total", name, f"{h['jobs']} job(s)", "",
                      f"{h['cost']:.2f} {h['currency'] or ''}".strip() if h["currency"] else "-", ""])
        styles.append(["bold", "", "", "", "bold"])
    return table(cols, cells, styles)


def cost_report(doc: CostSummary) -> None:
    """The table (or "no jobs yet"), then the hosts that could not be asked."""
    from rich.markup import escape

    from gpujob.ui.output import console

    c = console()
    if doc["jobs"]:
        import sys

        sys.stdout.write(cost_table(doc))
    else:
        c.print("no jobs yet")
    unpriced = sorted({str(j["host"]) for j in doc["jobs"] if j.get("cost") is None
                       and j.get("host") not in (None, "local", *doc["errors"])})  # an unreachable host: its error says why
    if unpriced:  # said once below the table: in each row it folded the narrow column over three lines
        c.print(escape(f"-: no price_per_hour on {', '.join(unpriced)} → gpujob host set "
                       f"{unpriced[0] if len(unpriced) == 1 else 'NAME'} --price PRICE_PER_HOUR"), style="dim")
    for name, e in doc["errors"].items():
        c.print(f"[yellow]{name}[/]: {escape(e)}")
