"""How ``gpujob pool ...`` prints: the pools, their instances with job and cost so far."""

from __future__ import annotations

import sys
import time
from typing import Any


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def listing(doc: dict[str, Any]) -> None:
    from gpujob.ui.neutral import clean

    for p in doc["pools"]:
        price = f", {p['price_per_hour']} {p.get('currency', '')}/h" if p.get("price_per_hour") else ""
        warm = f", keep warm {p['keep_warm']}" if p.get("keep_warm") else ""
        print(f"pool {p['name']}: max {p.get('max', 1)}{warm}{price}")
    rows = doc["instances"]
    if not rows:
        print("no instances" if doc["pools"] else "no pools (gpujob pool add NAME --create CMD --release CMD)")
    else:
        print(f"{'INSTANCE':<16} {'ID':<22} {'STATE':<15} {'JOB':<30} {'AGE':>8} {'COST':>10}")
    for r in rows:
        cost = f"{r['cost']:.2f} {r['currency'] or ''}".strip() if r["cost"] is not None else "-"
        print(f"{r['name']:<16} {clean(str(r['id'] or '-'))[:22]:<22} {r['state']:<15} {r['job_id'] or '-':<30} "
              f"{_age(r['age_s']):>8} {cost:>10}")
        if r["state"] == "release-failed":
            print(f"  ! {clean(r['note'] or '')} → gpujob pool release {r['name']} tries again")
    for e in doc["errors"]:
        print(f"gpujob: {clean(e)}", file=sys.stderr)


def added(doc: dict[str, Any]) -> None:
    print(f"pool {doc['added']} saved; gpujob submit JOB --pool {doc['added']} makes its first instance")


def removed(doc: dict[str, Any]) -> None:
    rel = f" (released {', '.join(doc['released'])})" if doc["released"] else ""
    print(f"pool {doc['removed']} removed{rel}")


def released(doc: dict[str, Any]) -> None:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(doc["released_at"])) if doc.get("released_at") else "-"
    print(f"{doc['name']} (instance {doc['id'] or '-'}) released at {when}")
