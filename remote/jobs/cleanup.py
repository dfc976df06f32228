"""What ``rm`` (one job's folder) and ``gc`` (what old jobs, environments, agents and projects hold)
may remove, what that frees, and the removal itself; the verbs (remote/verbs/cleanup.py) stop what
still runs first (a job with ``rm --force``, its TensorBoard).

A rented instance's data disk is small (AutoDL: about 50 GB). Nothing a queued or running job
needs is ever removed: its folder, its environment, the agent version its supervisor runs, and
the agent version answering now. The bytes reported are what removal frees: a file hard-linked
from elsewhere (a job's code snapshot shares its files with the project's code) counts only
when every link to it goes.
"""

import os
import shutil
import time
from pathlib import Path
from typing import Dict, List, Optional, Set, TypedDict

from remote.core import layout, locks, procs
from remote.core.layout import Root, read_doc, read_json
from remote.core.liveness import Verdict
from remote.core.protocol import SETTLED  # gc takes settled jobs only: a lost one may be resumed
from remote.data import datastore
from remote.data.datastore import GcItem
from remote.jobs import store as jobs


def freed_bytes(paths: List[Path]) -> int:
    """Bytes that removing ``paths`` gives back (a file's blocks only once all its links go)."""
    seen: Dict[tuple, List[int]] = {}
    for top in paths:
        try:
            tst = top.lstat()
        except OSError:
            continue
        walk = [(str(top), tst)]
        if not top.is_symlink() and top.is_dir():
            for dirpath, dirnames, filenames in os.walk(str(top)):
                for n in dirnames + filenames:
                    p = os.path.join(dirpath, n)
                    try:
                        walk.append((p, os.lstat(p)))
                    except OSError:
                        pass
        for _, st in walk:
            rec = seen.setdefault((st.st_dev, st.st_ino), [0, st.st_nlink, st.st_blocks * 512 or st.st_size])
            rec[0] += 1
    return sum(size for count, links, size in seen.values() if count >= links or links <= 1)


def remove_path(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(str(path))


def what(verdict: Verdict) -> str:
    """The job's state, and the processes of a lost one that still run."""
    left = verdict.left()
    return "{} and {} process(es) of it still run".format(verdict.state, len(left)) if left else str(verdict.state)


class GcPlan(TypedDict, total=False):
    """``plan``: what gc would remove, and ``dry_run`` once gc answers with it."""
    items: List[GcItem]
    bytes: int
    busy: List[str]
    agent: str
    older_than_s: float
    dry_run: bool
    tensorboards_stopped: List[str]  # job ids whose folder was gone while their TensorBoard served


def _agent_version() -> str:
    return layout.AGENT_DIR.name


def plan(root: Root, older_than: float, checkpoints_only: bool = False, now: Optional[float] = None) -> GcPlan:
    """What ``gc`` would remove: [{kind, path, bytes, job_id?}] and what it kept busy."""
    from remote.env import jobenv

    t = now if now is not None else time.time()
    cutoff = t - older_than
    boot = procs.boot_id()
    items = []  # type: List[GcItem]
    live_agents = {_agent_version()}
    used_envs = set()  # env hashes (and venv names) that kept jobs use
    used_projects = set()  # projects of kept jobs
    used_data = set()  # type: Set[str]  # top-level names under <root>/data that kept jobs' data: entries use
    used_blobs = set()  # type: Set[str]  # data store blobs kept jobs' views use (remote/data/datastore.py)
    blobs_unknown = False  # a kept job's refs unreadable: keep every blob
    env_unknown = False  # a live job whose environment is not recorded yet: keep every environment
    busy = []  # type: List[str]
    for job_id in jobs.all_job_ids(root):
        job = root.job(job_id)
        st, verdict = jobs.judged(root, job, boot)
        spec = job.job_spec()
        env = read_json(job.path / jobenv.FILE, None)
        state = st.state
        ended = float(st.ended_at or st.submitted_at or 0)
        old = state in SETTLED and ended < cutoff
        if verdict.lives:
            busy.append(job_id)
            if st.agent:
                live_agents.add(st.agent)
            if not isinstance(env, dict):
                env_unknown = True
        if old and checkpoints_only:
            if job.ckpt.is_dir() and not job.ckpt.is_symlink() and any(job.ckpt.iterdir()):
                items.append({"kind": "checkpoints", "job_id": job_id, "path": str(job.ckpt)})
        elif old:
            items.append({"kind": "job", "job_id": job_id, "path": str(job.path)})
            continue
        if isinstance(env, dict):
            used_envs.add(str(env.get("GPUJOB_ENV_HASH") or ""))
            if env.get("VIRTUAL_ENV"):
                used_envs.add(Path(str(env["VIRTUAL_ENV"])).name[len("venv-"):])
        used_projects.add(str(spec.project or spec.name or ""))
        used_data.update(d.strip("/").split("/")[0] for d in spec.data)
        job_refs = datastore.refs(job.path)
        if job_refs is None:
            blobs_unknown = True
        else:
            used_blobs |= job_refs
    if not checkpoints_only:
        if root.envs.is_dir() and not env_unknown:
            for p in sorted(root.envs.iterdir()):
                digest = p.name[:-3] if p.name.endswith(".ok") else p.name[len("venv-"):] if p.name.startswith("venv-") else None
                if digest and digest not in used_envs and _mtime(p) < cutoff:
                    items.append({"kind": "env", "path": str(p)})
        agents = root.root / "agent"
        if agents.is_dir():
            for p in sorted(agents.iterdir()):
                if p.is_dir() and p.name not in live_agents and _mtime(p) < cutoff:
                    items.append({"kind": "agent", "path": str(p)})
        projects = root.root / "projects"
        if projects.is_dir():
            for p in sorted(projects.iterdir()):
                if p.is_dir() and p.name not in used_projects and _mtime(p / "code") < cutoff:
                    items.append({"kind": "project", "path": str(p)})
        items += _unused_data(root, used_data, cutoff)
        items += [] if blobs_unknown else datastore.unused(root.root, used_blobs)
    for it in items:
        it["bytes"] = freed_bytes([Path(it["path"])])
    return {"items": items, "bytes": freed_bytes([Path(i["path"]) for i in items]), "busy": busy,
            "agent": _agent_version(), "older_than_s": older_than}


def _unused_data(root: Root, used: set, cutoff: float) -> List[GcItem]:
    """``<root>/data`` entries no kept job's ``data:`` names, untouched since ``cutoff``. None while a
    submit syncs (a live sync lease): the data it is sending has no job yet."""
    data = root.root / "data"
    projects = root.root / "projects"
    if not data.is_dir():
        return []
    for lease in projects.glob("*/sync.lease") if projects.is_dir() else []:
        until = read_doc(lease).get("until")
        if isinstance(until, (int, float)) and until > time.time():
            return []
    return [{"kind": "data", "path": str(p)} for p in sorted(data.iterdir())
            if p.name not in used and _mtime(p) < cutoff]


def _mtime(p: Path) -> float:
    try:
        return p.lstat().st_mtime
    except OSError:
        return 0.0


def blobs_in_use(root: Root) -> Set[str]:
    """Every blob a job folder still there names (gc's own removals are done by then); the
    names of any blob when a refs file is unreadable (nothing is then deleted)."""
    used = set()  # type: Set[str]
    for job_id in jobs.all_job_ids(root):
        r = datastore.refs(root.job(job_id).path)
        if r is None:
            return _AllNames()
        used |= r
    return used


class _AllNames(set):  # type: ignore[type-arg]
    def __contains__(self, name: object) -> bool:
        return True


def provisioning(p: Path) -> bool:
    """An environment whose lock a setup holds (its processes hold it even when their job's
    supervisor is gone): never deleted while something of ours writes into it."""
    digest = p.name[:-3] if p.name.endswith(".ok") else p.name[len("venv-"):]
    lock = p.parent / (digest + ".lock")
    if not lock.exists():
        return False
    with locks.flocked(lock, blocking=False) as got:
        return not got


def gc_project(root: Root, it: GcItem) -> None:
    """Remove an unused project unless a submit is syncing into it now (its sync lease is live):
    removing the code under a receive, or under the snapshot a submit takes of it, would start a
    job on a partial tree. The project's lock keeps the snapshot out meanwhile."""
    path = Path(it["path"])
    with locks.project_locked(root.root, path.name):
        until = read_doc(path / "sync.lease").get("until")
        if isinstance(until, (int, float)) and until > time.time():
            it["skipped"] = "syncing"
            return
        gc_item(it)


def gc_item(it: GcItem) -> None:
    path = Path(it["path"])
    if it["kind"] == "checkpoints":
        for child in list(path.iterdir()):
            remove_path(child)
    else:
        remove_path(path)
