"""``submit``: a job folder from a synced project (its code snapshot, its data view, its spec), and its
supervisor started detached; ``start_supervisor`` is shared with ``resume``."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Dict, Optional

from remote.core import layout, locks
from remote.core.errors import AgentError
from remote.core.jobrecord import JobRecord
from remote.core.layout import JobDir, Root, now, write_json
from remote.core.spec import JobSpec, submitted
from remote.jobs import inbox
from remote.jobs import index as jobindex
from remote.jobs.store import new_job_id


def snapshot(src: Path, dst: Path) -> None:
    """Hard-linked copy of the synced code: the job keeps the files it was submitted with.

    Safe because a sync never rewrites a file in place (new file + rename = new inode). Plain
    strings and ``scandir``'s types, not pathlib and a stat per name: this runs once per file of
    every submit (3,000 files: 0.65 s with ``Path`` joins under load, the links themselves 0.15 s)."""
    todo = [(str(src), str(dst))]
    while todo:
        here, there = todo.pop()
        os.makedirs(there, exist_ok=True)
        with os.scandir(here) as it:
            for e in it:
                target = os.path.join(there, e.name)
                if e.is_symlink():  # the user's link, as it was synced (it may point anywhere)
                    os.symlink(os.readlink(e.path), target)
                elif e.is_dir():
                    todo.append((e.path, target))
                else:
                    try:
                        os.link(e.path, target)
                    except OSError:
                        shutil.copy2(e.path, target)


def start_supervisor(root: Root, job: JobDir) -> int:
    """Start ``run`` detached in a new session, so a dropped SSH link cannot take it down."""
    log = open(str(job.supervisor_log), "ab")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(layout.AGENT_DIR)
    p = subprocess.Popen(
        [sys.executable, "-m", "remote", "--root", str(root.root), "run", job.id],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        close_fds=True, env=env, cwd=str(root.root),
    )
    log.close()
    return p.pid


def record_supervisor(job: JobDir, pid: int) -> None:
    """Name the supervisor just started (under the job's lock, before it runs): a ``stop`` of the
    queued job can then tell a dead supervisor from one still starting (it waited its whole
    ``--wait`` for a supervisor killed during setup or a GPU wait). Not fatal on a full disk."""
    try:
        rec = job.record()
        rec.supervisor_pid = pid
        job.write_record(rec)
    except OSError:
        pass


def submit(root: Root, request: Dict[str, Any]) -> Dict[str, Any]:
    """Create the job folder from a synced project and start its supervisor."""
    root.ensure()
    spec = JobSpec(dict(JobSpec.of(request["spec"]).doc, scheduler=request.get("scheduler")))
    if spec.slurm.on:  # what the cluster cannot give is refused before anything is made
        from remote.slurm import submit as slurm

        allotted = slurm.check(spec)
    project = request.get("project") or spec.name
    code = root.project_code(project)
    from remote.env import interpreter

    # the login shell's lookup of run:'s interpreter (up to a second) runs while the code is snapshot
    checked = None if request.get("moved_from") else \
        interpreter.start_check(root, spec, request.get("host_env") or {}, str(request.get("host") or ""))
    # the client syncs right before this; an absent folder is an empty tree (a project whose only
    # file is its job file, kept home for its secrets), which is a valid project
    code.mkdir(parents=True, exist_ok=True)
    job_id = request.get("job_id") or new_job_id(spec.name)
    job = root.job(job_id)
    carried = inbox.take_in(root, job, request) if request.get("moved_from") else {}  # a job moved here
    job.path.mkdir(parents=True, exist_ok=bool(carried))
    lease = request.get("lease")
    if lease:  # the code is what this submit sent: no other submit wrote since its manifest
        with locks.project_locked(root.root, project):
            if not locks.renew_locked(root.root, project, lease):
                shutil.rmtree(str(job.path), ignore_errors=True)
                raise AgentError("another submit of project {} took over its code while this one was quiet for "
                                 "longer than {:.0f} s".format(project, locks.lease_ttl()), "submit again", "lease_lost")
            snapshot(code, job.code)
            _data_view(root, project, spec, job, bool(carried))
            locks.release(root.root, project, lease)
    else:
        with locks.project_locked(root.root, project):
            snapshot(code, job.code)
            _data_view(root, project, spec, job, bool(carried))
    _interpreter_or_refuse(job, checked)
    _same_code_or_refuse(job, request.get("expect_code_hash"))
    _link_data_in_code(job, spec, bool(carried))  # after the hash: the laptop's code has no such links
    write_json(job.spec, dict(spec.doc, **submitted(request, project, job_id)))
    secrets = request.get("secrets") or {}
    if secrets:
        write_json(job.secrets, secrets, mode=0o600)
    with locks.job_lock(job.path):
        job.write_record(JobRecord({"job_id": job_id, "name": spec.name, "project": project, "state": "queued",
                                    "submitted_at": now(), "attempt": 0, "host": request.get("host"), **carried}))
        if carried:
            job.event("moved", **{k: v for k, v in carried["moves"][-1].items() if k != "t"})
        else:
            job.event("submitted")
        if spec.slurm.on:  # Slurm starts the supervisor where it places the job; refused: no job is left
            try:
                slurm_id = slurm.queue(root, job, job.job_spec(), allotted)
            except AgentError:
                shutil.rmtree(str(job.path), ignore_errors=True)
                raise
            job.write_record(job.record().update(slurm_job=slurm_id))
            job.event("slurm_queued", slurm_job=slurm_id)
        try:
            jobindex.add(root, job_id, spec.name, job.record().submitted_at or now())
        except OSError:  # a full disk: the next read adds the folder from its status.json
            pass
        if spec.slurm.on:
            return {"job_id": job_id, "state": "queued", "job_dir": str(job.path), "slurm_job": slurm_id}
        pid = start_supervisor(root, job)
        record_supervisor(job, pid)
    return {"job_id": job_id, "state": "queued", "job_dir": str(job.path), "supervisor_pid": pid}


def _data_view(root: Root, project: str, spec: JobSpec, job: JobDir, carried: bool) -> None:
    """The job's own view of its ``data:`` (remote/data/datastore.py): what this submit synced, for its whole life."""
    from remote.data import datastore
    from remote.data.transfer import hash_cache

    try:
        datastore.build_view(root.root, project, list(spec.data), job.path, hash_cache(root.root))
    except AgentError:  # a staged file damaged on the host: said as is, and no half-made job is left
        if not carried:
            shutil.rmtree(str(job.path), ignore_errors=True)
        raise
    except OSError as e:
        if not carried:  # a moved job's files stay for the next adopt
            shutil.rmtree(str(job.path), ignore_errors=True)
        raise AgentError("could not make the job's data view under {}: {}".format(job.path, e),
                         "free space on the instance (gpujob doctor), then submit again", "data_view") from None


def _link_data_in_code(job: JobDir, spec: JobSpec, carried: bool) -> None:
    """A ``data:`` source inside the code folder travels once, as data, never as code: its path in the
    job's code leads to the job's data view (``code/data/x.bin -> ../../data/x.bin``), so the script
    opens it where it did on the laptop. A path already taken, or under a link, is left as it is."""
    from remote.data.datastore import VIEW

    code = str(job.code)
    try:
        for rel, dst in sorted(spec.data_in_code.items()):
            parts, to = PurePosixPath(rel).parts, PurePosixPath(dst).parts
            if not parts or not to or rel.startswith("/") or dst.startswith("/") or ".." in parts + to:
                continue  # the laptop never sends these
            place = os.path.join(code, *parts)
            if os.path.lexists(place) or not _plain_folders(code, parts[:-1]):
                continue
            os.makedirs(os.path.dirname(place), exist_ok=True)
            os.symlink(os.path.relpath(os.path.join(str(job.path), VIEW, *to), os.path.dirname(place)), place)
    except OSError as e:
        if not carried:
            shutil.rmtree(str(job.path), ignore_errors=True)
        raise AgentError("could not link the job's data into its code folder under {}: {}".format(job.path, e),
                         "free space on the instance (gpujob doctor), then submit again", "data_view") from None


def _plain_folders(top: str, names: Any) -> bool:
    """Each of ``names`` under ``top`` is a folder that is no link, or absent (made then): nothing is
    written through a link of the user's."""
    here = top
    for name in names:
        here = os.path.join(here, name)
        if os.path.islink(here) or os.path.lexists(here) and not os.path.isdir(here):
            return False
    return True


def _same_code_or_refuse(job: JobDir, want: Any) -> None:
    """``rerun``: the job's code must hash as the run it repeats (remote/data/codehash.py), or no job."""
    if not isinstance(want, str) or not want:
        return
    from remote.data import codehash

    got = codehash.tree_hash(str(job.code))
    if got != want:
        shutil.rmtree(str(job.path), ignore_errors=True)
        raise AgentError("the code this host got hashes {}, not {} (the run it repeats): nothing was submitted"
                         .format(got, want), "run gpujob rerun again; gpujob doctor HOST if it says so twice",
                         "code_mismatch")


def _interpreter_or_refuse(job: JobDir, checked: Optional[Callable[[], None]]) -> None:
    """Refuse a job whose run: interpreter is not on the job PATH: its folder goes (the verb gives
    the sync lease back, remote/core/locks.py ``lease_back_on_failure``)."""
    if checked is None:
        return
    try:
        checked()
    except AgentError:
        shutil.rmtree(str(job.path), ignore_errors=True)
        raise


def wait_started(job: JobDir, timeout: float = 5.0) -> Optional[JobRecord]:
    """The record once the supervisor took the job (started, or queued for GPUs), else None after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = job.record()
        if st.state != "queued" or st.waiting_for_gpus:  # started, or in the GPU queue
            return st
        time.sleep(0.05)
    return None
