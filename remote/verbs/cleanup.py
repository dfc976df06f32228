"""``rm`` and ``gc``: what still runs is stopped first (the job itself with ``rm --force``, its
TensorBoard), then the files go; remote/jobs/cleanup.py says what may go and what that frees."""

import argparse
from pathlib import Path
from typing import Mapping

from remote.core import locks, procs
from remote.core.errors import AgentError
from remote.core.layout import Root
from remote.core.protocol import SETTLED
from remote.data import datastore
from remote.jobs import store as jobs
from remote.jobs.cleanup import (
    blobs_in_use,
    freed_bytes,
    gc_item,
    gc_project,
    plan,
    provisioning,
    remove_path,
    what,
)

__all__ = ["gc", "gc_verb", "plan", "remove", "rm"]  # plan: what gc would remove (remote/jobs/cleanup.py)


def _stop_tensorboard(root: Root, job_id: str) -> bool:
    """End the job's TensorBoard (a tunnel's, which outlives the job) as its folder goes; whether one ran."""
    from remote.view import tensorboard

    try:
        return bool(tensorboard.stop_tensorboard(root, job_id, grace=2.0, forget=True)["stopped"])
    except Exception:
        return False


def remove(root: Root, ref: str, force: bool = False, wait: float = 120.0) -> Mapping[str, object]:
    """Remove a job's folder; a queued or running one only with ``force`` (stopped first)."""
    job_id = jobs.resolve(root, ref)
    job = root.job(job_id)
    verdict = jobs.judged(root, job, procs.boot_id())[1]
    stopped = False
    if verdict.working:
        if not force:
            raise AgentError("{} is {}: it would lose its work".format(job_id, what(verdict)),
                             "stop it first (gpujob stop {0}), or gpujob rm {0} --force stops it, "
                             "then removes it".format(job_id), "running")
        from remote.verbs.jobs import stopped as stop_job

        stop_job(root, job_id, wait, reason="stopped by gpujob rm --force")
        if jobs.judged(root, job, procs.boot_id())[1].working:
            raise AgentError("{} did not stop within {:.0f} s; nothing was removed".format(job_id, wait),
                             "retry gpujob rm {} --force".format(job_id), "not_stopped")
        stopped = True
    with locks.job_lock(job.path, removed_is_error=True):  # judged again under the lock: a resume may have just restarted it
        verdict = jobs.judged(root, job, procs.boot_id())[1]
        if verdict.working:
            raise AgentError("{} was started again meanwhile ({}); nothing was removed".format(
                job_id, what(verdict)), "stop it first: gpujob stop {}".format(job_id), "running")
        _stop_tensorboard(root, job_id)
        size = freed_bytes([job.path])
        with datastore.releasing(root.root, job.path):  # its view's unlinks leave the blobs' prints true
            remove_path(job.path)
        from remote.stopping import cgroup

        cgroup.remove_for(str(job.path))  # the cgroup a killed supervisor left (empty by now)
    return {"job_id": job_id, "removed": True, "stopped": stopped, "bytes": size, "path": str(job.path)}


def gc(root: Root, older_than: float, dry_run: bool = False, checkpoints_only: bool = False) -> Mapping[str, object]:
    doc = plan(root, older_than, checkpoints_only)
    doc["dry_run"] = dry_run
    if dry_run:
        return doc
    tensorboards = []  # the removed jobs' TensorBoards that were serving
    for it in doc["items"]:
        if it.get("job_id"):
            job = root.job(it["job_id"])
            with locks.job_lock(job.path):  # a job resumed since the plan is kept
                if jobs.live_status(root, job, procs.boot_id()).state not in SETTLED:
                    it["skipped"] = "resumed"
                    continue
                if it["kind"] != "checkpoints" and _stop_tensorboard(root, it["job_id"]):  # else the job stays
                    tensorboards.append(it["job_id"])
                with datastore.releasing(root.root, job.path):  # its view's unlinks leave the blobs' prints true
                    gc_item(it)
        elif it["kind"] == "project":
            gc_project(root, it)
        elif it.get("blob"):
            datastore.remove_unused(root.root, it, lambda: blobs_in_use(root))
        elif it["kind"] == "env" and provisioning(Path(it["path"])):
            it["skipped"] = "being provisioned"
        else:
            gc_item(it)
    from remote.view import tensorboard

    doc["tensorboards_stopped"] = tensorboards + tensorboard.stop_orphans(root)  # orphans: their job went otherwise
    return doc


def rm(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    return remove(root, a.job, a.force, a.wait)


def gc_verb(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    return gc(root, a.older_than, a.dry_run, a.checkpoints_only)
