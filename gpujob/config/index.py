"""The laptop's record of which host each submitted job lives on (``jobs.jsonl``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TypedDict

from gpujob.config.paths import atomicfile, moved_from_config, state_dir


class Entry(TypedDict, total=False):
    """A line of ``jobs.jsonl`` (``record``'s), or the run ledger's row in its shape (config/remembered.py)."""

    job_id: str
    host: str
    name: str
    t: float
    job_file: str  # what ``move`` submits again: the job file, its overrides
    set: list[str]
    mirror: dict[str, Any]  # the spec's checkpoint_mirror (remote/mirror/config.py's normalised form)
    source: str  # "ledger": made from the run ledger's row
    moved_from: str  # a moved job: the host it left, and whether the copy there was marked moved
    old_marked: bool


def _path() -> Path:
    return moved_from_config(state_dir() / "jobs.jsonl")


def record(job_id: str, host: str, name: str, **extra: object) -> None:
    """``extra``: e.g. the job file and ``--set`` overrides (what ``gpujob move`` submits again)."""
    atomicfile().append(_path(), json.dumps({"job_id": job_id, "host": host, "name": name, "t": time.time(), **extra}) + "\n")


def entries() -> list[Entry]:
    p = _path()
    if not p.exists():
        return []
    out: list[Entry] = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def host_of(ref: str) -> str | None:
    """The host of the newest job whose id, id prefix or name is ``ref``; None if unknown here."""
    e = entry_of(ref)
    return e.get("host") if e else None


def _matches(ref: str, jid: str, name: object) -> bool:
    return ref in (jid, name) or jid.startswith(ref) or jid.rsplit("-", 1)[-1].startswith(ref)


def entry_of(ref: str) -> Entry | None:
    """The newest record of the job ``ref`` (id, id prefix or name), with fields that only
    older records of the same job hold (the job file of a job since moved) filled in.

    ``JobAmbiguous`` when ``ref`` is no full id and matches jobs that now live on different
    hosts: which one was meant is not guessed (a ``rm`` of the wrong one cannot be undone)."""
    es = entries()
    exact = any(e.get("job_id") == ref for e in es)
    where: dict[str, str] = {}  # job id → the host of its newest record
    for e in es:
        jid = e.get("job_id", "")
        if jid == ref if exact else _matches(ref, jid, e.get("name")):
            where[jid] = e.get("host", "")
    if len(set(where.values())) > 1:
        from gpujob.errors import JobAmbiguous

        listed = ", ".join(f"{jid} on {host}" for jid, host in list(where.items())[-6:])
        raise JobAmbiguous(f"{ref!r} matches jobs on several hosts: {listed}",
                           "pick one with --host HOST, or give more of the id")
    found: Entry | None = None
    for e in reversed(es):
        jid = e.get("job_id", "")
        if found is None and jid in where:
            found = e.copy()
        elif found is not None and jid == found["job_id"]:
            found = {**e, **found}
    return found


def record_pull(job_id: str, dest: str) -> None:
    """Where ``gpujob pull`` put a job's files (``move`` takes a checkpoint from there when its host is gone)."""
    atomicfile().append(state_dir() / "pulls.jsonl", json.dumps({"job_id": job_id, "dest": dest, "t": time.time()}) + "\n")


def pulls_of(job_id: str) -> list[str]:
    """Folders holding a pulled copy of the job, newest pull first."""
    p = state_dir() / "pulls.jsonl"
    out: list[str] = []
    for line in reversed(p.read_text().splitlines() if p.exists() else []):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("job_id") == job_id and e.get("dest") not in out:
            out.append(e["dest"])
    return out


def hosts() -> list[str]:
    """Hosts that have received jobs from this laptop, newest use last."""
    seen: dict[str, None] = {}
    for e in entries():
        seen.pop(e.get("host", ""), None)
        seen[e.get("host", "")] = None
    return [h for h in seen if h]


def forget(job_ids: set[str], host: str | None = None) -> int:
    """Drop the entries of ``job_ids`` (rewritten under the index's lock: a submit's line appended
    meanwhile is kept), only those of ``host`` when given (a host's answer names the jobs it
    removed: never another host's); how many went."""
    dropped = 0

    def edit(raw: bytes | None) -> bytes | None:
        nonlocal dropped
        keep = []
        for line in (raw or b"").decode("utf-8", "replace").splitlines():
            try:
                e = json.loads(line)
                jid, where = e.get("job_id"), str(e.get("host") or "").split(",")
            except (ValueError, AttributeError):
                jid, where = None, []
            if jid in job_ids and (host is None or host in where):
                dropped += 1
            else:
                keep.append(line + "\n")
        return "".join(keep).encode() if dropped else None

    atomicfile().update(_path(), edit)
    return dropped
