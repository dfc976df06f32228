"""``gpujob runs`` and ``gpujob compare``: the ledger's runs, filtered and sorted; runs side by side."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from gpujob.config.ledger import open_ledger
from gpujob.config.ledger.params import command_of, parse_where
from gpujob.config.ledger.store import LedgerRow
from gpujob.errors import GpujobError
from gpujob.jsontypes import JSON
from gpujob.usecases.experiments.direction import direction, maximized

if TYPE_CHECKING:  # the lab's client is imported only where a command asks for the lab's runs
    from gpujob.usecases.lab.labruns import ShownRow

ROW_KEYS = ("job_id", "name", "host", "state", "submitted_at", "started_at", "ended_at", "params", "final", "best",
            "gpu_hours", "cost", "currency", "gpu", "git_commit", "diff_hash", "code_hash", "env_hash", "parent",
            "sweep", "trial", "loss_key")


class RunsPage(TypedDict):
    """``runs``: the rows shown, how many match, the order asked for."""

    runs: list[LedgerRow] | list[ShownRow]
    total: int
    shown: int
    sort: str | None


class ComparedRuns(TypedDict, total=False):
    """``compare``: per key, each run's value (in the order asked), what differs apart from what is the same."""

    runs: list[dict[str, object]]
    params: dict[str, list[Any]]
    same_params: dict[str, object]
    code: dict[str, list[object]]
    env: dict[str, list[object]]
    final: dict[str, list[Any]]
    best: dict[str, list[Any]]
    cost: list[float | None]
    currency: list[str | None]  # each run's cost's
    directions: dict[str, str]  # metric -> maximize|minimize: which way its best went
    gpu_hours: list[float | None]
    loss_key: str | None
    series: dict[str, list[list[list[JSON]]]]  # metric -> each run's curve
    plot: str  # the client's: where the curves were drawn


def runs(name: str | None = None, where: list[str] | tuple[str, ...] = (), sort: str | None = None,
         limit: int = 50, sweep: str | None = None, mlflow: str | None = None) -> RunsPage:
    """{runs: [...], total, shown}: runs matching every ``where`` (``lr<1e-3``), best ``sort`` first
    (lowest for a loss, highest for an accuracy; ``-KEY`` the other way), else newest first.
    ``mlflow``: the lab's runs on that server too ("": ``MLFLOW_TRACKING_URI``), each with its ``source``."""
    conds = [parse_where(w) for w in where]
    order = None
    with open_ledger() as lg:
        if sort:
            key = sort.lstrip("-")
            way = lg.declared_direction(key)
            order = (key, maximized(key, {key: way} if way else None) != sort.startswith("-"))
        found, total = lg.query(conds, order, 0 if mlflow is not None else limit, name=name, sweep=sweep,
                                cols=(*ROW_KEYS, "extra"))
    for r in found:  # which way each best went: the job file's word, else the metric's name
        extra = r.pop("extra", None) or {}
        declared = extra.get("directions")
        r["directions"] = {k: direction(k, declared) for k in r.get("best") or {}}
    rows: list[LedgerRow] | list[ShownRow] = found
    if mlflow is not None:  # the lab's runs beside this laptop's (a run both have is shown once, as the ledger has it)
        from gpujob.usecases.lab.labruns import lab_rows

        mine = {r["job_id"] for r in found}
        lab = [r for r in lab_rows(mlflow or None, name, sweep) if r["job_id"] not in mine and _matches(r, conds)]
        ledger: list[ShownRow] = [{**r, "source": "ledger"} for r in found]
        rows = _ordered(ledger + lab, order)
        total = len(rows)
        rows = rows[:limit] if limit else rows
    return {"runs": rows, "total": total, "shown": len(rows), "sort": sort}


def _value_of(row: Mapping[str, object], key: str) -> Any:
    """A row's value of ``key`` as the ledger's query reads it: a column, a parameter, a best, a final metric."""
    if key in row and key not in ("params", "best", "final"):
        return row[key]
    for part in ("params", "best", "final"):
        values = row.get(part)
        for k in (key, key.replace("-", "_")):
            if isinstance(values, dict) and k in values:  # a JSON column: a dict or None
                return values[k]
    return None


def _matches(row: LedgerRow, conds: list[tuple[str, str, Any]]) -> bool:
    import operator

    ops = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "=": operator.eq,
           "==": operator.eq, "!=": operator.ne}
    for key, op, want in conds:
        have = _value_of(row, key)
        if op == "~":
            if have is None or str(want) not in str(have):
                return False
            continue
        try:
            if have is None or not ops[op](have, want):
                return False
        except TypeError:
            return False
    return True


def _ordered(rows: list[ShownRow], order: tuple[str, bool] | None) -> list[ShownRow]:
    if order is None:
        return sorted(rows, key=lambda r: r.get("submitted_at") or 0.0, reverse=True)
    key, desc = order
    nums = [r for r in rows if isinstance(_value_of(r, key), (int, float))]
    rest = [r for r in rows if r not in nums]
    return sorted(nums, key=lambda r: _value_of(r, key), reverse=desc) + rest


def _values(runs_: list[LedgerRow], part: Literal["params", "final", "best"]) -> dict[str, list[Any]]:
    keys: dict[str, None] = {}
    for r in runs_:
        keys.update(dict.fromkeys(r.get(part) or {}))
    return {k: [(r.get(part) or {}).get(k) for r in runs_] for k in keys}


def _differs(vals: list[Any]) -> bool:
    return any(v != vals[0] for v in vals[1:])


def unseen(refs: list[str]) -> list[tuple[str, str | None]]:
    """(job id, host) of the runs among ``refs`` whose curves the ledger has not got yet."""
    with open_ledger() as lg:
        rows = [lg.find(ref) for ref in refs]
    return [(r["job_id"], r.get("host")) for r in rows if r and not r.get("series")]


def _lab_run(ref: str) -> ShownRow | None:
    """A colleague's run, from the lab's MLflow (``MLFLOW_TRACKING_URI``), when this ledger lacks it."""
    from gpujob.usecases.lab.target import env_uri

    if not env_uri():
        return None
    from gpujob.usecases.lab.labruns import lab_run

    return lab_run(None, ref)


def compare(refs: list[str]) -> ComparedRuns:
    """The runs ``refs`` side by side: the parameters, code and environment that differ (and the
    ones they share), final and best metrics, and their curves."""
    if len(refs) < 2:
        raise GpujobError("compare needs two runs or more", "e.g. gpujob compare RUN_A RUN_B (gpujob runs lists them)")
    found = []
    with open_ledger() as lg:
        for ref in refs:
            row = lg.find(ref) or _lab_run(ref)
            if row is None:
                raise GpujobError(f"no run {ref!r} in the ledger", "gpujob runs lists the runs this laptop knows"
                                  " (gpujob runs --from mlflow: the lab's, with MLFLOW_TRACKING_URI set)")
            found.append(row)
    params = _values(found, "params")
    code = {k: [r.get(k) for r in found] for k in ("code_hash", "git_commit", "diff_hash")}
    code["command"] = [command_of(r.get("run_line") or "") for r in found]  # the arguments are in params
    env = {k: [r.get(k) for r in found] for k in ("env_hash", "host", "gpu")}
    loss = next((r.get("loss_key") for r in found if r.get("loss_key")), None)
    declared = {k: v for r in reversed(found) for k, v in ((r.get("extra") or {}).get("directions") or {}).items()}
    series: dict[str, list[list[list[JSON]]]] = {}
    for r in found:
        for k in (r.get("series") or {}):
            series.setdefault(k, [])
    for k in series:
        series[k] = [(r.get("series") or {}).get(k) or [] for r in found]
    return {
        "runs": [{k: r.get(k) for k in ("job_id", "name", "host", "state", "parent", "sweep", "trial")} for r in found],
        "params": {k: v for k, v in params.items() if _differs(v)},
        "same_params": {k: v[0] for k, v in params.items() if not _differs(v)},
        "code": {k: v for k, v in code.items() if _differs(v)},
        "env": {k: v for k, v in env.items() if _differs(v)},
        "final": _values(found, "final"),
        "best": _values(found, "best"),
        "cost": [r.get("cost") for r in found],
        "currency": [r.get("currency") for r in found],
        "directions": {k: direction(k, declared) for k in _values(found, "best")},
        "gpu_hours": [r.get("gpu_hours") for r in found],
        "loss_key": loss,
        "series": series,
    }
