"""Where a moving job's files arrive (``<root>/incoming/<job id>/``, filled by ``move.adopt``)
and how that folder becomes the job's when ``jobs.submit`` creates it: below both modules.
"""

import os
import shutil
from typing import Any, Dict

from remote.core.layout import JobDir, Root, now

# what the job's history is made of: everything else in the old folder belongs to that host
CARRIED_STATUS = ("job_id", "name", "project", "submitted_at", "attempt", "attempts", "moves")


def incoming_dir(root: Root, job_id: str) -> JobDir:
    """The incoming folder of ``job_id`` (a checked id: ``move.incoming`` checks it)."""
    return JobDir(root.root / "incoming" / job_id)


def take_in(root: Root, job: JobDir, request: Dict[str, Any]) -> Dict[str, Any]:
    """Make the received folder the job's (a job moving back replaces its ``moved`` record);
    returns the status fields the job carries over."""
    inbox = incoming_dir(root, job.id)
    if job.path.exists():
        shutil.rmtree(str(job.path))
    os.replace(str(inbox.path), str(job.path))
    prev = request.get("previous") or {}
    carried = {k: prev[k] for k in CARRIED_STATUS if k in prev}
    move = {"from": request.get("moved_from"), "to": request.get("host"), "t": now(), "source": request.get("source")}
    carried["moves"] = list(carried.get("moves") or []) + [move]
    carried["restart_base"] = int(carried.get("attempt") or 0)
    return carried
