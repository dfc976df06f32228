"""``gpujob rm JOB...`` and ``gpujob gc HOST``: give a host's disk back (one agent call each)."""

from __future__ import annotations

from typing import Any, Callable

from gpujob.transport.agent import Agent


def remove_jobs(refs: list[str], agent_for: Callable[[str], Agent], host: str | None = None,
                force: bool = False) -> list[dict[str, Any]]:
    """Remove each job's folder on ``host`` (None: where the index says it ran), then its entry in the index."""
    from gpujob.config import index

    out = []
    for ref in refs:
        agent = agent_for(host or index.host_of(ref) or "local")
        res = agent.call("rm", ["--job", ref] + (["--force"] if force else []), timeout=900)
        res["host"] = agent.host.name
        index.forget({res["job_id"]})
        out.append(res)
    return out


def collect(agent: Agent, older_than_s: float, dry_run: bool, checkpoints_only: bool = False) -> dict[str, Any]:
    args = ["--older-than", repr(float(older_than_s))] + (["--dry-run"] if dry_run else [])
    doc = agent.call("gc", args + (["--checkpoints-only"] if checkpoints_only else []), timeout=1800)
    doc["host"] = agent.host.name
    if not dry_run:
        from gpujob.config import index

        index.forget({i["job_id"] for i in doc["items"] if i["kind"] == "job"})
    return doc

