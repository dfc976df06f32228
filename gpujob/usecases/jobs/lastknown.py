"""``ls`` with a host that does not answer: its jobs as this laptop last knew them.

The job index says which jobs a host holds; the run ledger keeps what the last look at each saw
(its state, times, final metrics) and when that look wrote it. A row made here says so itself:
``unreachable`` (the host's error) and ``last_seen`` (the ledger's time), so no reader takes it for
the host's word."""

from __future__ import annotations

import sqlite3

from gpujob.bundle import import_remote
from gpujob.config import index
from gpujob.jsontypes import JSONObject

_protocol = import_remote("core.protocol")
RECENT: int = 30  # finished jobs a plain listing shows, as the agent's listing does (remote/jobs/index.py)


def last_known(host: str, error: str, everything: bool = False) -> list[JSONObject]:
    """The index's jobs on ``host``, oldest first, each from the ledger's row (state "unknown" where it
    has none), marked unreachable; a plain listing keeps the unfinished ones and the newest finished."""
    from gpujob.config.ledger import LedgerDamaged, ledger_path, open_ledger
    from gpujob.config.ledger.store import LedgerRow

    ids = list(dict.fromkeys(e["job_id"] for e in index.entries() if e.get("host") == host and e.get("job_id")))
    names = {e["job_id"]: e.get("name") or "" for e in index.entries() if e.get("host") == host and e.get("job_id")}
    rows: dict[str, LedgerRow] = {}
    if ids and ledger_path().exists():
        try:
            with open_ledger() as lg:
                rows = {i: r for i in ids if (r := lg.get(i)) is not None}
        except (sqlite3.Error, OSError, LedgerDamaged):
            rows = {}  # the ledger's own commands say what is wrong with it
    out: list[JSONObject] = []
    for job_id in ids:
        row = rows.get(job_id) or {}
        doc: JSONObject = {"job_id": job_id, "name": row.get("name") or names.get(job_id, ""), "host": host,
                           "state": row.get("state") or "unknown", "unreachable": error}
        for key in ("submitted_at", "started_at", "ended_at"):
            if isinstance(row.get(key), (int, float)):
                doc[key] = row[key]
        if isinstance(row.get("updated_at"), (int, float)):
            doc["last_seen"] = row["updated_at"]
        if isinstance(row.get("final"), dict) and row["final"]:
            doc["last_metrics"] = row["final"]
        out.append(doc)
    if everything:
        return out
    done = [d for d in out if d["state"] in _protocol.SETTLED]
    newest = {id(d) for d in done[-RECENT:]}
    return [d for d in out if d["state"] not in _protocol.SETTLED or id(d) in newest]
