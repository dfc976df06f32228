"""The lab's runs as the MLflow server holds them (every laptop's exports), in the ledger's row shape,
for ``gpujob runs --from mlflow`` and a ``compare`` with a colleague's run."""

from __future__ import annotations

import json
from typing import Any

from gpujob.config.ledger.store import LedgerRow
from gpujob.errors import ConnectError, GpujobError
from gpujob.usecases.lab.export import STATUS, client_for
from gpujob.usecases.lab.target import check_uri, env_uri

STATE_OF = {"RUNNING": "running", "SCHEDULED": "queued"}  # else the gpujob.state tag, else MLflow's word
MAX_RUNS = 5000


class ShownRow(LedgerRow, total=False):
    """A run as ``runs --from mlflow`` and ``compare`` show it: the ledger's columns, and where it came from."""

    source: str  # "ledger" or "mlflow"
    user: str | None  # mlflow's: who exported it
    mlflow_run_id: str


def server(uri: str | None) -> str:
    where = uri or env_uri()
    if not where:
        raise GpujobError("no MLflow server named", "set MLFLOW_TRACKING_URI, or give --mlflow URI")
    return check_uri(where)


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _row(run: Any) -> ShownRow:
    tags, info, data = run.data.tags, run.info, run.data
    metrics = {k: v for k, v in data.metrics.items() if not k.startswith("gpujob/")}
    state = tags.get("gpujob.state") or STATE_OF.get(info.status) or \
        {v: k for k, v in STATUS.items()}.get(info.status, info.status.lower())
    trial = tags.get("gpujob.trial")
    return {"job_id": tags.get("gpujob.job_id") or info.run_id, "name": tags.get("gpujob.name"),
            "host": tags.get("gpujob.host"), "state": state, "submitted_at": (info.start_time or 0) / 1000 or None,
            "started_at": (info.start_time or 0) / 1000 or None, "ended_at": (info.end_time or 0) / 1000 or None,
            "params": {k: _value(v) for k, v in data.params.items()}, "final": metrics, "best": {},
            "cost": data.metrics.get("gpujob/cost"), "gpu_hours": data.metrics.get("gpujob/gpu_hours"),
            "currency": None, "gpu": tags.get("gpujob.gpu"), "git_commit": tags.get("mlflow.source.git.commit"),
            "code_hash": tags.get("gpujob.code_hash"), "env_hash": tags.get("gpujob.env_hash"),
            "diff_hash": None, "parent": tags.get("gpujob.parent"), "sweep": tags.get("gpujob.sweep"),
            "trial": int(trial) if trial and trial.isdigit() else None, "loss_key": None,
            "run_line": tags.get("gpujob.run_line"), "source": "mlflow", "user": tags.get("mlflow.user"),
            "mlflow_run_id": info.run_id}


def _search(uri: str, filters: list[str]) -> list[Any]:
    c = client_for(uri)
    try:
        exps = [e.experiment_id for e in c.search_experiments()]
        runs: list[Any] = []
        token = None
        while exps and len(runs) < MAX_RUNS:
            page = c.search_runs(exps, filter_string=" and ".join(filters), max_results=1000, page_token=token,
                                 order_by=["attributes.start_time DESC"])
            runs += list(page)
            token = page.token
            if not token:
                break
        return runs
    except Exception as e:  # the client's and requests' own errors: the server's word
        raise ConnectError(f"MLflow at {uri} did not answer ({' '.join(str(e).split())[:300]})",
                           "check the server, or leave out --from mlflow") from None


def lab_rows(uri: str | None, name: str | None = None, sweep: str | None = None) -> list[ShownRow]:
    """Every gpujob run on the server (``name``/``sweep``: only those), newest first."""
    filters = ["tags.`gpujob.job_id` LIKE '%'"]
    for tag, val in (("gpujob.name", name), ("gpujob.sweep", sweep)):
        if val:
            filters.append(f"tags.`{tag}` = '{val.replace(chr(39), '')}'")
    return [_row(r) for r in _search(server(uri), filters)]


def lab_run(uri: str | None, ref: str) -> ShownRow | None:
    """The run ``ref`` (a job id, or its unique end) on the server, with its curves; None: not there."""
    where = server(uri)
    safe = ref.replace("'", "")
    found = _search(where, [f"tags.`gpujob.job_id` LIKE '%{safe}'"])
    exact = [r for r in found if r.data.tags.get("gpujob.job_id") == ref]
    pick = exact or (found if len(found) == 1 else [])
    if not pick:
        return None
    row = _row(pick[0])
    c = client_for(where)
    row["series"] = {k: [[m.step, m.value, m.timestamp / 1000] for m in c.get_metric_history(row["mlflow_run_id"], k)]
                     for k in row.get("final") or {}}
    return row
