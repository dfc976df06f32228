"""Where a run is exported: the job file's ``mlflow:``, else ``MLFLOW_TRACKING_URI`` (as MLflow's own
clients read it). The server's credentials are MLflow's usual variables, read here only."""

from __future__ import annotations

import os
from dataclasses import dataclass

from gpujob.config.ledger.store import LedgerRow, MlflowTarget
from gpujob.config.secreturl import credential_in, shown
from gpujob.errors import GpujobError


@dataclass(frozen=True)
class Target:
    uri: str
    experiment: str


def env_uri() -> str | None:
    return os.environ.get("MLFLOW_TRACKING_URI") or None


def of_row(row: LedgerRow, uri: str | None = None) -> Target | None:
    """The row's export target (``uri`` given: that server, the row's experiment); None: not exported."""
    mine = ((row.get("extra") or {}).get("mlflow") or {}) if isinstance(row.get("extra"), dict) else MlflowTarget()
    where = uri or mine.get("tracking_uri") or env_uri()
    if not where:
        return None
    exp = mine.get("experiment") or os.environ.get("MLFLOW_EXPERIMENT_NAME") or row.get("name") or "gpujob"
    return Target(where, str(exp))


def check_uri(uri: str) -> str:
    """``uri`` when it is usable here; a password in it is refused (it would be stored and shown)."""
    if credential_in(uri):
        raise GpujobError(f"the MLflow URI {shown(uri)} holds a password",
                          "give it in MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)")
    return uri
