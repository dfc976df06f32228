"""``gpujob rm JOB...`` and ``gpujob gc HOST``: give a host's disk back (one agent call each)."""

from __future__ import annotations

from typing import Callable

from gpujob.errors import GpujobError
from gpujob.jsontypes import JSONObject
from gpujob.transport.agent import Agent


def remove_jobs(refs: list[str], agent_for: Callable[[str], Agent], host: str | None = None,
                force: bool = False) -> list[JSONObject]:
    """Remove each job's folder on ``host`` (None: where the index says it ran), then its entry in the
    index. A job that cannot be removed does not stop the others: the error, raised after all were
    tried, names both."""
    from gpujob.config import index

    out, failed = [], []
    for ref in refs:
        try:
            agent = agent_for(host or index.host_of(ref) or "local")
            res = agent.call("rm", ["--job", ref] + (["--force"] if force else []), timeout=900)
        except GpujobError as e:
            if len(refs) == 1:
                raise
            failed.append((ref, e))
            continue
        res["host"] = agent.host.name
        left = _mirror_left(res["job_id"])
        if left:
            res["mirror_left"] = left
        index.forget({res["job_id"]}, agent.host.name)
        out.append(res)
    if failed:
        done = ", ".join(r["job_id"] for r in out) or "none"
        why = "; ".join(f"{ref}: {e.cause}" for ref, e in failed)
        err = failed[0][1]  # its kind and exit code, with every job's outcome
        err.cause = f"{len(failed)} of {len(refs)} jobs not removed ({why}); removed: {done}"
        raise err
    return out


def _mirror_left(job_id: str) -> list[str]:
    """Where the job's mirrored checkpoints stay after ``rm`` (its folder on each ``checkpoint.mirror``
    target): rm removes the host's copy only, and the run ledger still leads to these."""
    from gpujob.config import remembered

    try:
        mirror = (remembered.entry_of(job_id) or {}).get("mirror") or {}
    except GpujobError:
        return []
    return [f"{str(t).rstrip('/')}/{job_id}" for t in mirror.get("targets") or []]


def collect(agent: Agent, older_than_s: float, dry_run: bool, checkpoints_only: bool = False) -> JSONObject:
    args = ["--older-than", repr(float(older_than_s))] + (["--dry-run"] if dry_run else [])
    doc = agent.call("gc", args + (["--checkpoints-only"] if checkpoints_only else []), timeout=1800)
    doc["host"] = agent.host.name
    if not dry_run:
        from gpujob.config import index

        index.forget({i["job_id"] for i in doc["items"] if i["kind"] == "job"}, agent.host.name)
    return doc

