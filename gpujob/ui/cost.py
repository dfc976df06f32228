"""``gpujob cost`` drawn: one row per job, then one total per host."""

from __future__ import annotations

from typing import Any

from gpujob.bundle import import_remote

format_duration = import_remote("protocol").format_duration


def cost_table(doc: dict[str, Any]) -> Any:
    """A rich table of the ``cost --json`` document."""
    from rich.table import Table

    from gpujob.ui.neutral import clean_doc

    doc = clean_doc(doc, markup=True)  # job ids, states and currencies came from the hosts: text, never markup
    t = Table(box=None, header_style="bold")
    # a job id is never cut (it is what the next command takes); at a narrow width the other columns fold
    t.add_column("JOB", no_wrap=True, min_width=max([len(j["job_id"] or "?") for j in doc["jobs"]] + [3]))
    for col in ("HOST", "STATE", "ELAPSED", "COST", "PROJECTED"):
        t.add_column(col, overflow="fold")
    for j in doc["jobs"]:
        cur = j.get("currency") or ""
        t.add_row(j["job_id"] or "?", j["host"] or "-", j["state"] or "?", format_duration(j.get("elapsed_s")),
                  f"{j['cost']:.2f} {cur}" if j.get("cost") is not None else "-",
                  f"{j['projected_cost']:.2f} {cur}" if j.get("projected_cost") is not None else "-")
    for name, h in doc["hosts"].items():
        t.add_row(f"[bold]{name} total[/]", name, f"{h['jobs']} job(s)", "",
                  f"[bold]{h['cost']:.2f} {h['currency'] or ''}[/]" if h["currency"] else "-", "")
    return t


def cost_report(doc: dict[str, Any]) -> None:
    """The table (or "no jobs yet"), then the hosts that could not be asked."""
    from rich.markup import escape

    from gpujob.ui.output import console

    c = console()
    c.print(cost_table(doc) if doc["jobs"] else "no jobs yet")
    unpriced = sorted({str(j["host"]) for j in doc["jobs"] if j.get("cost") is None
                       and j.get("host") not in (None, "local", *doc["errors"])})  # an unreachable host: its error says why
    if unpriced:  # said once below the table: in each row it folded the narrow column over three lines
        c.print(escape(f"-: no price_per_hour on {', '.join(unpriced)} → gpujob host set "
                       f"{unpriced[0] if len(unpriced) == 1 else 'NAME'} --price PRICE_PER_HOUR"), style="dim")
    for name, e in doc["errors"].items():
        c.print(f"[yellow]{name}[/]: {escape(e)}")
