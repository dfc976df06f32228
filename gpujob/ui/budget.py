"""``gpujob budget``'s table: per currency and period the limit, the spend and what is left."""

from __future__ import annotations

import time
from typing import Any


def _money(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def budget_report(doc: Any) -> None:
    cur_rows = doc.get("currencies") or {}
    if not cur_rows:
        print("no limit set and nothing spent this month; set one: gpujob budget set --month 500")
    for cur, rows in cur_rows.items():
        print(f"{'PERIOD':<8} {'SINCE':<11} {'LIMIT ' + cur:>14} {'SPENT':>12} {'LEFT':>12}")
        for r in rows:
            since = time.strftime("%Y-%m-%d", time.localtime(r["since"]))
            left = _money(r["left"]) + (" (passed)" if r["left"] is not None and r["left"] <= 0 else "")
            print(f"{r['period']:<8} {since:<11} {_money(r['limit']):>14} {_money(r['spent']):>12} {left:>12}")
    for c in doc.get("running") or []:
        print(f"  running: {c['what']} on {c['host']}: {c['cost']:.2f} {c['currency']} so far "
              f"({c['price_per_hour']:g}/h)")
    b = doc.get("balance")
    if b:
        if b.get("error"):
            print(f"balance: not read: {b['error']}")
        else:
            under = f", under the threshold {b['below']:.2f}" if b.get("low") else \
                (f" (notifies under {b['below']:.2f})" if b.get("below") is not None else "")
            print(f"balance: {b['value']:,.2f} {b['currency']}{under}")
    for a in doc.get("actions") or []:
        names = ", ".join(s["job_id"] for s in a["stopped"])
        print(f"the {a['period']} limit is passed" + (f": stopping after their next checkpoint: {names}" if names else ""))
    if not doc.get("notify_file"):
        print("  (no --notify file: a limit passed is told on the channels of the jobs it stops)")
