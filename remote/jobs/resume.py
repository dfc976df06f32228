"""``resume``: a lost, stopped or failed job restarted under the same id, from its newest complete
checkpoint (``resume_point``), once nothing of it runs and this host has the GPUs it asks for."""

import os
from typing import Dict, Mapping

from remote.core import locks, procs
from remote.core.errors import AgentError
from remote.core.layout import JobDir, Root, agent_log, now, read_json
from remote.jobs import index as jobindex
from remote.jobs.saved import checkpoint_list
from remote.jobs.store import judged
from remote.jobs.submit import record_supervisor, start_supervisor

STOP_TURN = 60.0  # s a resume waits for the stops under way (a stop after the next checkpoint may take long)


def resume(root: Root, job_id: str) -> Mapping[str, object]:
    """Restart a lost, stopped or failed job under the same id, from its newest complete checkpoint."""
    job = root.job(job_id)
    # the stops under way answer first (each for the run it stopped): at most STOP_TURN s, then as before
    with locks.stop_turn(job.path, shared=False, wait=STOP_TURN), \
            locks.job_lock(job.path, removed_is_error=True):  # a second resume waits here, then finds the job running
        st, verdict = judged(root, job, procs.boot_id())
        if st.state == "moved":
            raise AgentError("job {} moved to {}: it goes on there".format(job_id, st.moved_to),
                             "gpujob resume {} (the laptop knows its new host)".format(job_id), "moved")
        if verdict.locked and not verdict.lives and \
                (read_json(job.path / "mirror.json") or {}).get("ending"):
            raise AgentError("job {} ended ({}) and its supervisor is still sending the last checkpoint to the "
                             "mirror".format(job_id, st.state),
                             "gpujob status {} shows the upload; resume once it is mirrored (checkpoint.mirror.wait "
                             "bounds the wait)".format(job_id), "already_running")
        if verdict.locked or verdict.lives:
            raise AgentError("job {} is already running ({}): its supervisor is alive".format(
                job_id, st.state), "follow it with: gpujob tail -f {}".format(job_id), "already_running")
        if st.state == "succeeded":
            raise AgentError("job {} has succeeded: only a lost, stopped or failed job can be resumed".format(job_id),
                             "see gpujob status {}".format(job_id), "bad_state")
        on_slurm = job.job_spec().slurm.on
        no_gpus = "" if on_slurm else gpus_lacking(job)  # Slurm places it: the login node has no GPUs to judge
        if no_gpus:  # refused before anything changes: the job stays as it was, resumable later
            raise AgentError("job {} was not resumed: {}".format(job_id, no_gpus),
                             "power the instance on with its GPUs (gpujob doctor shows them), then resume again; "
                             "or continue it on another host: gpujob move {} --to HOST".format(job_id), "no_gpus")
        procs.kill_tree(job_id, None, 5.0, job_dir=str(job.path))
        for p in (job.stop_file, job.stop_watch, job.stop_acted, job.stop_ended, job.stop_after):
            try:
                p.unlink()
            except OSError:
                pass
        fresh = job.record()
        # the ended run's, not this one's (its supervisor too: until the new one is named, the
        # heartbeat's age decides)
        fresh.drop("lost_reason", "diagnosis", "remedy", "killed", "stopping", "supervisor_pid")
        fresh.update(state="queued", resumed_at=now(), ended_at=None, exit_code=None, reason=None,
                     restart_base=int(fresh.attempt or 0), heartbeat=now(), boot_id=procs.boot_id())
        jobindex.mark(root, [job_id], False)  # first: a full disk refusing it leaves the job as it was
        if on_slurm:  # a new Slurm job: its supervisor must find the record resumed (refused: as it was)
            from remote.slurm import submit as slurm

            allotted = slurm.check(job.job_spec())
            before = job.record()
            fresh.drop("slurm_job")  # the ended Slurm job's word must not judge the resumed record
            job.write_record(fresh.update(requeues=0))
            try:
                fresh.update(slurm_job=slurm.queue(root, job, job.job_spec(), allotted))
            except AgentError:
                job.write_record(before)
                raise
            fresh = job.record().update(slurm_job=fresh.slurm_job)
        job.write_record(fresh)
        job.event("resumed", previous=st.state)
        pid = 0 if on_slurm else start_supervisor(root, job)
        if pid:
            record_supervisor(job, pid)
    agent_log(root, "resumed {} ({})".format(job_id, "Slurm job {}".format(fresh.slurm_job) if on_slurm
                                            else "supervisor {}".format(pid)))
    doc: Dict[str, object] = {"job_id": job_id, "state": "queued", "previous": st.state}
    doc.update({"slurm_job": fresh.slurm_job} if on_slurm else {"supervisor_pid": pid})
    doc.update(resume_point(job))
    return doc


def resume_point(job: JobDir) -> Mapping[str, object]:
    """What a restart hands the run command as GPUJOB_RESUME: {resume_from: the newest complete checkpoint
    (under ckpt/) or None, incomplete: why the newest others are not (only when none is complete)}."""
    from remote.ckpt import keepcopy

    try:  # a file rewritten in place and cut short: the supervisor puts its kept copy back first
        kept = keepcopy.stand_ins(job.path)
    except OSError:
        kept = {}
    found = checkpoint_list(job, job.job_spec(), live=False)
    done = [c for c in found if c.get("complete")]
    for name, (_, rec) in sorted(kept.items(), key=lambda kv: kv[1][1].get("mtime_ns") or 0, reverse=True):
        if not done or done[-1]["mtime"] * 1e9 < int(rec.get("mtime_ns") or 0):
            step = rec.get("step")
            return {"resume_from": "{} (its last complete version{}, kept by gpujob: the save in place was cut "
                                   "short)".format(name[len("ckpt/"):], ", step {}".format(step) if isinstance(step, int) else "")}
    if done:
        return {"resume_from": done[-1]["name"]}
    return {"resume_from": None, "incomplete": ["{}: {}".format(c["name"], c.get("incomplete_reason") or "?")
                                                for c in found][-3:]}


def gpus_lacking(job: JobDir) -> str:
    """Why this host can never give the job the GPUs its spec asks for now, else "" (busy is fine:
    it queues). A resume after the instance came back without its GPUs would fail at once, or
    train for hours on the CPU."""
    from remote.host import gpus

    spec = job.job_spec()
    n = gpus.wanted(spec)
    if n is None:
        return ""
    prefix = spec.path_prefix or os.environ.get("GPUJOB_PATH_PREFIX", "")
    found, error = gpus.probe(prefix)
    return gpus.lacking(found, error, n)
