"""Which checkpoints of a host exist only there, as this laptop knows them (no host is asked).

The job index says which jobs a host holds (``rm`` and ``gc`` forget them, a move records the new
host); the run ledger keeps what the last look saw of each: its state, its newest complete
checkpoint (``status JOB`` lists them) and what its ``checkpoint.mirror`` holds. A checkpoint is
safe elsewhere when a mirror target marked it (or a newer step) or a ``gpujob pull`` put it here."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TypedDict

from gpujob.config import index
from gpujob.config.ledger.store import LedgerRow


class Held(TypedDict, total=False):
    """One job of the host: its newest complete checkpoint and where else it is (``None``: only there)."""

    job_id: str
    name: str
    state: str
    checkpoint: str | None  # None: no look listed its checkpoints
    step: int | None
    elsewhere: str | None  # "mirror TARGET" or "pulled to PATH"; None: only on the instance


def jobs_on(host: str) -> list[str]:
    """The jobs whose newest index record puts them on ``host`` (a several-node job on any of its hosts)."""
    newest: dict[str, str] = {}
    for e in index.entries():
        if e.get("job_id"):
            newest[e["job_id"]] = str(e.get("host") or "")
    return [j for j, h in newest.items() if host in h.split(",")]


def ledger_rows(ids: list[str]) -> dict[str, LedgerRow]:
    """The ledger's rows of ``ids`` it has; none when it cannot be read."""
    from gpujob.config.ledger import LedgerDamaged, ledger_path, open_ledger

    if not ids or not ledger_path().exists():
        return {}
    try:
        with open_ledger() as lg:
            return {i: r for i in ids if (r := lg.get(i)) is not None}
    except (sqlite3.Error, OSError, LedgerDamaged):
        return {}  # the ledger's own commands say what is wrong with it


def held(host: str) -> list[Held]:
    """Every job of ``host`` this laptop knows, with its newest checkpoint and where else it is."""
    ids = jobs_on(host)
    rows = ledger_rows(ids)
    out: list[Held] = []
    for job_id in ids:
        row = rows.get(job_id) or {}
        live = (row.get("extra") or {}).get("live") or {}
        ck = live.get("checkpoint")
        doc: Held = {"job_id": job_id, "name": row.get("name") or "", "state": row.get("state") or "unknown",
                     "checkpoint": ck["name"] if ck else None, "step": ck.get("step") if ck else None,
                     "elsewhere": None}
        if ck:
            step = ck.get("step")
            for m in live.get("mirrored") or []:  # the marked one, or a newer step (the mirror keeps the newest)
                if m.get("name") == ck["name"] or (step is not None and (m.get("step") or -1) >= step):
                    doc["elsewhere"] = f"mirror {m.get('target')}"
                    break
            else:
                copies = [Path(d) / job_id / "ckpt" / ck["name"] for d in index.pulls_of(job_id)]
                doc["elsewhere"] = next((f"pulled to {p}" for p in copies if p.exists()), None)
        out.append(doc)
    return out


def only_there(jobs: list[Held]) -> list[Held]:
    """The jobs whose newest checkpoint is on the instance alone, or whose checkpoints no look listed."""
    return [j for j in jobs if not j.get("elsewhere")]


def describe(j: Held) -> str:
    """``bert-ft (20261207-ab12), succeeded: checkpoint-120`` for a message or a note."""
    who = f"{j['name']} ({j['job_id']})" if j.get("name") and j["name"] != j["job_id"] else j["job_id"]
    if not j.get("checkpoint"):
        return f"{who}, {j.get('state')}: its checkpoints were never listed here (whatever it saved is there only)"
    named = j.get("step") is None or str(j["checkpoint"]).endswith(str(j["step"]))  # checkpoint-120: said
    step = "" if named else f" (step {j['step']})"
    return f"{who}, {j.get('state')}: {j['checkpoint']}{step}"
