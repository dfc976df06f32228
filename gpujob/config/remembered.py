"""A job as this laptop remembers it: the job index's entry, else the run ledger's row.

The index (``jobs.jsonl``) says where a job lives and is forgotten by ``rm`` and ``gc``; the run
ledger keeps every job this laptop submitted, with its spec (its ``checkpoint.mirror`` too), its
job file and ``--set`` overrides. So a job whose host no longer has it (removed, the instance
re-imaged) can still be resumed, moved or pulled from wherever its checkpoints are (the mirror,
a pull on this machine, shared storage): every lookup that starts from a job reference and needs
more than its host goes through ``entry_of``.
"""

from __future__ import annotations

import sqlite3

from gpujob.config import index


def entry_of(ref: str) -> index.Entry | None:
    """The index's entry for ``ref`` (id, id prefix or name), else one made from the ledger's newest
    matching row (``"source": "ledger"``); None when neither knows it. ``JobAmbiguous`` as in the index."""
    found = index.entry_of(ref)
    if found is not None:
        return found
    return from_ledger(ref)


def from_ledger(ref: str) -> index.Entry | None:
    """The ledger's row for ``ref`` in the index's shape; None when the ledger has none (or cannot be
    read: it is kept aside and said by the commands that read it)."""
    from gpujob.config.ledger import LedgerDamaged, ledger_path, open_ledger

    if not ledger_path().exists():
        return None
    try:
        with open_ledger() as lg:
            row = lg.find(ref)
    except (sqlite3.Error, OSError, LedgerDamaged):
        return None
    host = row.get("host") if row else None
    if not row or not host:
        return None
    spec = s if isinstance(s := row.get("spec"), dict) else {}
    out: index.Entry = {"job_id": row["job_id"], "host": host, "name": row.get("name") or "",
                        "set": row.get("overrides") or [], "source": "ledger"}
    if job_file := row.get("job_file"):
        out["job_file"] = job_file
    mirror = spec.get("checkpoint_mirror")
    if isinstance(mirror, dict) and mirror.get("targets"):
        out["mirror"] = mirror
    return out


def host_of(ref: str) -> str | None:
    """The host the job was last known on: the index's, else the ledger's."""
    e = entry_of(ref)
    return e.get("host") if e else None
