"""The laptop watches the account: ``gpujob budget`` and ``gpujob guard``'s loop.

Several jobs together can pass a limit that none passes alone (each was capped at what was left
when it was submitted). ``watch`` sums the charges; for a limit passed it first asks the hosts how
their jobs the ledger saw running are (an ended one counts no more), then stops those still running
after their next checkpoint (``stop --after-checkpoint``), and notifies once per limit and period.
The provider's balance is read at most every ``GPUJOB_BALANCE_EVERY`` s (``gpujob budget``: always)
and notifies once when it falls under its threshold (again only after it rose above it).
State: ``budget-state.json`` in the state folder.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, TypedDict

from gpujob.config.budget import PERIODS, Budget, load_budget
from gpujob.config.paths import atomicfile, state_dir
from gpujob.errors import GpujobError
from gpujob.jsontypes import JSONObject
from gpujob.usecases.budget.charges import Charge, as_json, charges, period_name, period_start, spent

Note = Callable[[str], None]
BALANCE_EVERY_S = float(os.environ.get("GPUJOB_BALANCE_EVERY", "600"))


class PeriodFigures(TypedDict):
    period: str  # day | week | month
    label: str  # 2026-12-07, 2026-W50, 2026-12
    since: float
    limit: float | None
    spent: float
    left: float | None


class Stopped(TypedDict):
    job_id: str
    host: str | None
    state: object


class Crossing(TypedDict):
    """A limit found passed by one look, and what that look did."""

    currency: str
    period: str
    limit: float | None
    spent: float
    stopped: list[Stopped]
    notified: bool


class Look(TypedDict):
    limits: list[Crossing]
    balance: JSONObject | None


class Report(TypedDict):
    """``gpujob budget --json``."""

    currencies: dict[str, list[PeriodFigures]]
    running: list[JSONObject]
    balance: JSONObject | None
    actions: list[Crossing]
    balance_command: str | None
    balance_below: float | None
    notify_file: str | None


def _state_path() -> Any:
    return state_dir() / "budget-state.json"


def _update(edit: Callable[[dict[str, Any]], bool | None]) -> dict[str, Any]:
    return atomicfile().update_json(_state_path(), edit, 0o600)


def _once(key: str, now: float) -> bool:
    """Whether this process is the first to say ``key`` (a limit's crossing in one period); kept 40 days."""
    claimed: list[bool] = []

    def claim(doc: dict[str, Any]) -> bool:
        said = doc.setdefault("said", {})
        for k in [k for k, t in said.items() if not isinstance(t, (int, float)) or t < now - 40 * 86400]:
            del said[k]
        if key in said:
            return False
        said[key] = now
        claimed.append(True)
        return True

    _update(claim)
    return bool(claimed)


def figures(budget: Budget, have: list[Charge], now: float) -> dict[str, list[PeriodFigures]]:
    """currency -> each period's limit, spend and what is left (every currency with a limit or a charge)."""
    out: dict[str, list[PeriodFigures]] = {}
    for cur in sorted(set(budget.limits) | {c.currency for c in have}):
        rows: list[PeriodFigures] = []
        for p in PERIODS:
            used, limit = round(spent(have, cur, p, now), 4), budget.limit(cur, p)
            rows.append({"period": p, "label": period_name(p, now), "since": period_start(p, now), "limit": limit,
                         "spent": used, "left": None if limit is None else round(limit - used, 4)})
        out[cur] = rows
    return out


def _refresh(running: list[Charge], note: Note) -> list[tuple[Charge, Any]]:
    """Each job the ledger saw running as its host says now (the ledger learns it); those still running,
    with an agent to stop them. A host that does not answer keeps its jobs (they are stopped later)."""
    from gpujob.config.hosts import HostStore
    from gpujob.transport.agent import connect_agent
    from gpujob.usecases.experiments.record import observe
    from gpujob.usecases.jobs import ops

    live = []
    for c in running:
        try:
            agent = connect_agent(HostStore().get(c.host))
            doc = ops.status(agent, c.what)
        except GpujobError as e:
            note(f"budget: {c.what} on {c.host}: not reached ({e.cause})")
            continue
        observe([doc], c.host)
        if doc.get("state") not in ops.FINAL:
            live.append((c, agent))
        else:
            agent.close()
    return live


def _stop(live: list[tuple[Charge, Any]], reason: str, note: Note) -> list[Stopped]:
    from gpujob.usecases.jobs import ops

    out: list[Stopped] = []
    for c, agent in live:
        try:
            doc = ops.stop(agent, c.what, wait=0, after_checkpoint=True, reason=reason)
            out.append({"job_id": c.what, "host": c.host, "state": doc.get("state")})
            note(f"budget: {c.what} on {c.host}: stopping after its next checkpoint ({reason})")
        except GpujobError as e:
            note(f"budget: {c.what} on {c.host}: the stop was not sent ({e.cause}); tried again next time")
        finally:
            agent.close()
    return out


def _limits(budget: Budget, now: float, note: Note) -> list[Crossing]:
    """Stop what runs past a limit and say each limit passed once; what was done."""
    from gpujob.usecases.budget.channels import send

    done: list[Crossing] = []
    have = charges(now)
    for cur, rows in figures(budget, have, now).items():
        passed = [r for r in rows if r["limit"] is not None and r["spent"] >= r["limit"]]
        if not passed:
            continue
        running = [c for c in have if c.currency == cur and c.end is None]
        live = _refresh(running, note) if running else []
        have = charges(now)  # what the hosts said ended counts no more
        rows = figures(budget, have, now).get(cur, [])
        passed = [r for r in rows if r["limit"] is not None and r["spent"] >= r["limit"]]
        if not passed:
            for _, agent in live:
                agent.close()
            continue
        r = passed[-1]  # the longest period passed names the crossing
        text = (f"the {r['period']} limit of {r['limit']:.2f} {cur} is passed: {r['spent']:.2f} {cur} spent since "
                f"{time.strftime('%Y-%m-%d', time.localtime(r['since']))}")
        stopped = _stop(live, f"budget: {text}", note)
        key = f"{cur}:{r['period']}:{r['label']}:{r['limit']:g}"  # a limit raised and passed again is said again
        first = _once(key, now)
        if first:
            names = ", ".join(f"{s['job_id']} ({s['host']})" for s in stopped)
            event: JSONObject = {
                "event": "budget", "job_id": "", "name": "account", "host": None, "duration_s": None,
                "cost": r["spent"], "currency": cur, "metrics": {},
                "reason": text + (f"; stopping after their next checkpoint: {names}" if names else
                                  "; no job of this laptop runs"),
                "remedy": f"raise it: gpujob budget set --{r['period']} AMOUNT"}
            sent = send(budget, event, [s["job_id"] for s in stopped] if stopped else [c.what for c in running])
            note(f"budget: {text} (notified {sum(1 for s in sent if s.get('ok'))} channel(s))")
        done.append({"currency": cur, "period": r["period"], "limit": r["limit"], "spent": r["spent"],
                     "stopped": stopped, "notified": first})
    return done


def _balance(budget: Budget, now: float, force: bool, note: Note) -> JSONObject | None:
    """The balance (read anew when ``force`` or older than BALANCE_EVERY_S), notifying on a fall under
    the threshold; None without a balance command."""
    import json

    from gpujob.usecases.budget.balance import BalanceError, read_balance
    from gpujob.usecases.budget.channels import send

    if not budget.balance_command:
        return None
    try:
        kept = json.loads(_state_path().read_text()).get("balance") or {}
    except (OSError, ValueError, AttributeError):
        kept = {}
    cur, below = budget.balance_currency, budget.balance_below
    if not force and isinstance(kept.get("at"), (int, float)) and now - kept["at"] < BALANCE_EVERY_S:
        return dict(kept, currency=cur, below=below, cached=True)
    try:
        value = read_balance(budget.balance_command)
    except BalanceError as e:
        note(f"budget: {e}")
        return {"value": None, "at": now, "currency": cur, "below": below, "error": str(e)}
    low = below is not None and value < below
    fell: list[bool] = []

    def keep(doc: dict[str, Any]) -> None:
        if low and not (doc.get("balance") or {}).get("low"):
            fell.append(True)
        doc["balance"] = {"at": now, "value": value, "low": low}

    _update(keep)
    if fell:
        text = f"the account's balance is {value:.2f} {cur}, under {below:.2f} {cur}"
        sent = send(budget, {"event": "balance_low", "job_id": "", "name": "account", "host": None,
                             "duration_s": None, "cost": None, "currency": cur, "metrics": {}, "reason": text,
                             "remedy": "top the account up; running jobs stop when it is empty"})
        note(f"budget: {text} (notified {sum(1 for s in sent if s.get('ok'))} channel(s))")
    return {"value": value, "at": now, "currency": cur, "below": below, "low": low, "notified": bool(fell)}


def watch(note: Note = lambda s: None, now: float | None = None, force_balance: bool = False) -> Look:
    """One look at the account (guard's loop, ``gpujob budget``): the limits passed and what was done,
    and the balance."""
    budget = load_budget()
    now = time.time() if now is None else now
    return {"limits": _limits(budget, now, note) if budget.limits else [],
            "balance": _balance(budget, now, force_balance, note)}


def guard_pass(note: Note) -> None:
    """``watch`` from guard's loop: what keeps it from looking is said, and the loop goes on."""
    try:
        watch(note)
    except GpujobError as e:
        note(f"budget: the account was not looked at: {e}")


def report(note: Note = lambda s: None) -> Report:
    """``gpujob budget``: a look at the account (``watch``), then per currency and period the limit, the
    spend and what is left, the charges still running, the balance and what is set."""
    looked = watch(note, force_balance=True)
    budget, now = load_budget(), time.time()
    have = charges(now)
    return {"currencies": figures(budget, have, now), "running": [as_json(c, now) for c in have if c.end is None],
            "balance": looked["balance"], "actions": looked["limits"], "balance_command": budget.balance_command,
            "balance_below": budget.balance_below, "notify_file": budget.notify_file}
