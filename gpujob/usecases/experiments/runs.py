"""``gpujob runs`` and ``gpujob compare``: the ledger's runs, filtered and sorted; runs side by side."""

from __future__ import annotations

from typing import Any

from gpujob.config.ledger import open_ledger
from gpujob.config.ledger.params import command_of, parse_where
from gpujob.errors import GpujobError
from gpujob.usecases.experiments.record import higher_is_better

ROW_KEYS = ("job_id", "name", "host", "state", "submitted_at", "started_at", "ended_at", "params", "final", "best",
            "gpu_hours", "cost", "currency", "gpu", "git_commit", "diff_hash", "code_hash", "env_hash", "parent",
            "sweep", "trial", "loss_key")


def runs(name: str | None = None, where: list[str] | tuple[str, ...] = (), sort: str | None = None,
         limit: int = 50, sweep: str | None = None) -> dict[str, Any]:
    """{runs: [...], total, shown}: runs matching every ``where`` (``lr<1e-3``), best ``sort`` first
    (lowest for a loss, highest for an accuracy; ``-KEY`` the other way), else newest first."""
    conds = [parse_where(w) for w in where]
    order = None
    if sort:
        key = sort.lstrip("-")
        order = (key, higher_is_better(key) != sort.startswith("-"))
    with open_ledger() as lg:
        rows, total = lg.query(conds, order, limit, name=name, sweep=sweep, cols=ROW_KEYS)
    return {"runs": rows, "total": total, "shown": len(rows), "sort": sort}


def _values(runs_: list[dict[str, Any]], part: str) -> dict[str, list[Any]]:
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


def compare(refs: list[str]) -> dict[str, Any]:
    """The runs ``refs`` side by side: the parameters, code and environment that differ (and the
    ones they share), final and best metrics, and their curves."""
    if len(refs) < 2:
        raise GpujobError("compare needs two runs or more", "e.g. gpujob compare RUN_A RUN_B (gpujob runs lists them)")
    found = []
    with open_ledger() as lg:
        for ref in refs:
            row = lg.find(ref)
            if row is None:
                raise GpujobError(f"no run {ref!r} in the ledger", "gpujob runs lists the runs this laptop knows")
            found.append(row)
    params = _values(found, "params")
    code = {k: [r.get(k) for r in found] for k in ("code_hash", "git_commit", "diff_hash")}
    code["command"] = [command_of(r.get("run_line") or "") for r in found]  # the arguments are in params
    env = {k: [r.get(k) for r in found] for k in ("env_hash", "host", "gpu")}
    loss = next((r.get("loss_key") for r in found if r.get("loss_key")), None)
    series: dict[str, list[list[list[Any]]]] = {}
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
        "gpu_hours": [r.get("gpu_hours") for r in found],
        "loss_key": loss,
        "series": series,
    }
