"""What this laptop has exported, per run and server (``<state>/mlflow-export.sqlite``): the MLflow run
id, the ledger row's version sent, and the last point of each metric, so a look sends only what is
new and a second export adds nothing."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from gpujob.config.paths import state_dir

SCHEMA = """
CREATE TABLE IF NOT EXISTS exported (
    job_id TEXT, uri TEXT, run_id TEXT, updated_at REAL, last TEXT, params TEXT, status TEXT,
    PRIMARY KEY (job_id, uri)
);
"""


class ExportState:
    def __init__(self) -> None:
        path = state_dir() / "mlflow-export.sqlite"
        self.db = sqlite3.connect(str(path), timeout=30.0, isolation_level=None)
        self.db.execute("PRAGMA busy_timeout=30000")
        self.db.executescript(SCHEMA)
        path.chmod(0o600)

    def close(self) -> None:
        self.db.close()

    def versions(self, uri: str) -> dict[str, float]:
        """job id -> the ledger row's ``updated_at`` last sent to ``uri``."""
        return {j: u or 0.0 for j, u in self.db.execute("SELECT job_id, updated_at FROM exported WHERE uri=?", (uri,))}

    def get(self, job_id: str, uri: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT run_id, updated_at, last, params, status FROM exported WHERE job_id=? AND uri=?",
                              (job_id, uri)).fetchone()
        if row is None:
            return None
        return {"run_id": row[0], "updated_at": row[1], "last": json.loads(row[2] or "{}"),
                "params": json.loads(row[3] or "[]"), "status": row[4]}

    def put(self, job_id: str, uri: str, run_id: str, updated_at: float, last: dict[str, Any], params: list[str],
            status: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO exported VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (job_id, uri, run_id, updated_at, json.dumps(last), json.dumps(sorted(params)), status))
