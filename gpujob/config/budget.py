"""The account's money limits (``gpujob budget set``): ``budget.json`` in the config folder, 0600.

Per currency a limit per calendar period (day, week, month); the provider's ``balance`` command and
the threshold under which it notifies; the file whose ``notify:`` channels hear about the account.
Each change is one read-modify-write under the file's lock (config/paths.py ``atomicfile``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpujob.config.paths import atomicfile, config_dir
from gpujob.errors import GpujobError

PERIODS = ("day", "week", "month")
DEFAULT_CURRENCY = "CNY"
LIMIT_MAX = 1e12


def budget_path() -> Path:
    return config_dir() / "budget.json"


@dataclass
class Budget:
    """What ``budget.json`` holds. ``limits``: currency -> period -> amount."""

    limits: dict[str, dict[str, float]] = field(default_factory=dict)
    balance_command: str | None = None
    balance_below: float | None = None
    balance_currency: str = DEFAULT_CURRENCY
    notify_file: str | None = None

    def limit(self, currency: str, period: str) -> float | None:
        return self.limits.get(currency, {}).get(period)


def _amount(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 else None


def _of(doc: dict[str, Any]) -> Budget:
    limits: dict[str, dict[str, float]] = {}
    raw = doc.get("limits")
    for cur, per in (raw.items() if isinstance(raw, dict) else []):
        if isinstance(cur, str) and isinstance(per, dict):
            kept = {p: a for p in PERIODS if (a := _amount(per.get(p))) is not None}
            if kept:
                limits[cur] = kept
    cmd, nf, bc = doc.get("balance_command"), doc.get("notify_file"), doc.get("balance_currency")
    return Budget(limits, cmd if isinstance(cmd, str) and cmd else None, _amount(doc.get("balance_below")),
                  bc if isinstance(bc, str) and bc else DEFAULT_CURRENCY, nf if isinstance(nf, str) and nf else None)


def load_budget() -> Budget:
    """The limits as set; no file: none (a damaged file reads as none too: ``budget set`` rewrites it)."""
    import json

    try:
        doc = json.loads(budget_path().read_text())
    except FileNotFoundError:
        return Budget()
    except (OSError, ValueError) as e:
        raise GpujobError(f"{budget_path()} cannot be read ({e})",
                          "fix or remove it, then set the limits again: gpujob budget set --month X") from None
    return _of(doc if isinstance(doc, dict) else {})


def parse_amount(flag: str, text: str) -> float | None:
    """A limit or threshold as typed: a number from 0 to 10^12; an empty value clears it (None)."""
    if text.strip() == "":
        return None
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or not 0 <= v <= LIMIT_MAX:
        raise GpujobError(f"{flag} {text[:40]!r}: expected an amount from 0 to {LIMIT_MAX:g}, or '' to clear it",
                          f"e.g. gpujob budget set {flag} 500")
    return v


def save_budget(currency: str, limits: dict[str, float | None], balance: dict[str, Any]) -> Budget:
    """Apply a ``budget set``: ``limits`` period -> amount (None clears); ``balance``: the keys
    ``balance_command``, ``balance_below``, ``notify_file`` given (None clears). The budget after."""

    def edit(doc: dict[str, Any]) -> None:
        per = doc.setdefault("limits", {}).setdefault(currency, {})
        for p, v in limits.items():
            if v is None:
                per.pop(p, None)
            else:
                per[p] = v
        if not per:
            doc["limits"].pop(currency, None)
        for k, v in balance.items():
            if v is None:
                doc.pop(k, None)
            else:
                doc[k] = v
        if "balance_below" in balance:
            doc["balance_currency"] = currency

    return _of(atomicfile().update_json(budget_path(), edit, 0o600))
