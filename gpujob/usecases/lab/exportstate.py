"""What this laptop has exported, per run and server (``<state>/mlflow-export.sqlite``): the MLflow run
id, the ledger row's version sent, and the last point of each metric, so a look sends only what is
new and a second export adds nothing; which ended run's whole curve the server has; and which refusal of a run the server's last answer was, so it
is said once. A server's URI here never holds a password (``export`` refuses such a URI)."""

from __future__ import annotations

import json
import sqlite3
from typing import TypedDict

from gpujob.config.paths import state_dir
from gpujob.config.secreturl import credential_in

SCHEMA = """
CREATE TABLE IF NOT EXISTS exported (
    job_id TEXT, uri TEXT, run_id TEXT, updated_at REAL, last TEXT, params TEXT, status TEXT,
    PRIMARY KEY (job_id, uri)
);
CREATE TABLE IF NOT EXISTS refused (job_id TEXT, uri TEXT, why TEXT, PRIMARY KEY (job_id, uri));
CREATE TABLE IF NOT EXISTS whole (job_id TEXT, uri TEXT, ended TEXT, PRIMARY KEY (job_id, uri));
"""


class Sent(TypedDict):
    """What a run on a server holds of a ledger row: its id, each metric's last [step, value], its params."""

    run_id: str
    last: dict[str, list[float]]
    params: list[str]
    status: str | None  # MLflow's word (RUNNING, FINISHED ...), or "deleted"


class Exported(Sent):
    """``Sent`` as this state file keeps it, with the row's ``updated_at`` then."""

    updated_at: float | None


class ExportState:
    def __init__(self) -> None:
        path = state_dir() / "mlflow-export.sqlite"
        self.db = sqlite3.connect(str(path), timeout=30.0, isolation_level=None)
        self.db.execute("PRAGMA busy_timeout=30000")
        self.db.executescript(SCHEMA)
        path.chmod(0o600)
        self._scrub()

    def _scrub(self) -> None:
        """Rows an older gpujob keyed by a URI holding a password: removed, their bytes overwritten."""
        bad = [u for (u,) in self.db.execute("SELECT DISTINCT uri FROM exported") if credential_in(u or "")]
        if bad:
            self.db.execute("PRAGMA secure_delete=ON")
            self.db.executemany("DELETE FROM exported WHERE uri=?", [(u,) for u in bad])
            self.db.execute("VACUUM")

    def close(self) -> None:
        self.db.close()

    def versions(self, uri: str) -> dict[str, float]:
        """job id -> the ledger row's ``updated_at`` last sent to ``uri``."""
        return {j: u or 0.0 for j, u in self.db.execute("SELECT job_id, updated_at FROM exported WHERE uri=?", (uri,))}

    def get(self, job_id: str, uri: str) -> Exported | None:
        row = self.db.execute("SELECT run_id, updated_at, last, params, status FROM exported WHERE job_id=? AND uri=?",
                              (job_id, uri)).fetchone()
        if row is None:
            return None
        return {"run_id": row[0], "updated_at": row[1], "last": json.loads(row[2] or "{}"),
                "params": json.loads(row[3] or "[]"), "status": row[4]}

    def put(self, job_id: str, uri: str, run_id: str, updated_at: float, last: dict[str, list[float]], params: list[str],
            status: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO exported VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (job_id, uri, run_id, updated_at, json.dumps(last), json.dumps(sorted(params)), status))

    def forget(self, job_id: str, uri: str) -> None:
        self.db.execute("DELETE FROM exported WHERE job_id=? AND uri=?", (job_id, uri))
        self.db.execute("DELETE FROM whole WHERE job_id=? AND uri=?", (job_id, uri))

    def whole_sent(self, job_id: str, uri: str) -> str | None:
        """The end of the job whose whole curve ``uri`` has (every step the host logged), if any."""
        row = self.db.execute("SELECT ended FROM whole WHERE job_id=? AND uri=?", (job_id, uri)).fetchone()
        return row[0] if row else None

    def put_whole(self, job_id: str, uri: str, ended: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO whole VALUES (?, ?, ?)", (job_id, uri, ended))

    def deleted(self, uri: str) -> set[str]:
        """The jobs whose run someone deleted on ``uri`` (left so, docs/experiments.md)."""
        return {j for (j,) in self.db.execute("SELECT job_id FROM exported WHERE uri=? AND status='deleted'", (uri,))}

    def refused_anew(self, job_id: str, uri: str, why: str) -> bool:
        """Note that ``uri`` refused the run of ``job_id`` for ``why``; False when that was its last word too."""
        row = self.db.execute("SELECT why FROM refused WHERE job_id=? AND uri=?", (job_id, uri)).fetchone()
        if row is not None and row[0] == why:
            return False
        self.db.execute("INSERT OR REPLACE INTO refused VALUES (?, ?, ?)", (job_id, uri, why))
        return True

    def taken(self, job_id: str, uri: str) -> None:
        """The server took the run: a later refusal is said again."""
        self.db.execute("DELETE FROM refused WHERE job_id=? AND uri=?", (job_id, uri))
