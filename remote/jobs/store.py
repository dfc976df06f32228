"""Job records on the instance: create, find by prefix, list with liveness, stop, resume."""

import json
import os
import random
import shutil
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from remote.core import layout, locks, procs
from remote.core.errors import AgentError
from remote.core.layout import (
    JobDir,
    Root,
    agent_log,
    now,
    read_json,
    screen_lines,
    tail_lines,
    write_json,
)
from remote.core.protocol import TERMINAL
from remote.jobs import inbox
from remote.jobs import index as jobindex


def stale_after() -> float:
    """Seconds without a heartbeat after which a record is stale (read at each look: ``agent.env`` may set it)."""
    return float(os.environ.get("GPUJOB_STALE_AFTER", "30"))


def new_job_id(name: str) -> str:
    suffix = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(5))
    return "{}-{}-{}".format(name[:40], time.strftime("%m%d%H%M"), suffix)


def snapshot(src: Path, dst: Path) -> None:
    """Hard-linked copy of the synced code: the job keeps the files it was submitted with.

    Safe because a sync never rewrites a file in place (new file + rename = new inode).
    """
    for dirpath, dirnames, filenames in os.walk(str(src)):
        rel = os.path.relpath(dirpath, str(src))
        target = dst / rel if rel != "." else dst
        target.mkdir(parents=True, exist_ok=True)
        for name in dirnames:
            s = os.path.join(dirpath, name)
            if os.path.islink(s):
                os.symlink(os.readlink(s), str(target / name))
        for name in filenames:
            s = os.path.join(dirpath, name)
            if os.path.islink(s):
                os.symlink(os.readlink(s), str(target / name))
            else:
                try:
                    os.link(s, str(target / name))
                except OSError:
                    shutil.copy2(s, str(target / name))


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
        job.write_status(dict(job.status(), supervisor_pid=pid))
    except OSError:
        pass


def submit(root: Root, request: Dict[str, Any]) -> Dict[str, Any]:
    """Create the job folder from a synced project and start its supervisor."""
    root.ensure()
    spec = request["spec"]
    project = request.get("project") or spec["name"]
    code = root.project_code(project)
    if not request.get("moved_from"):
        _interpreter_or_refuse(root, project, spec, request)
    # the client syncs right before this; an absent folder is an empty tree (a project whose only
    # file is its job file, kept home for its secrets), which is a valid project
    code.mkdir(parents=True, exist_ok=True)
    job_id = request.get("job_id") or new_job_id(spec["name"])
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
    _same_code_or_refuse(job, request.get("expect_code_hash"))
    spec = dict(spec, project=project, host=request.get("host"), host_env=request.get("host_env") or {},
                price_per_hour=request.get("price_per_hour"), currency=request.get("currency", "CNY"),
                shutdown_command=request.get("shutdown_command"), node=request.get("node"), job_id=job_id,
                cpu_fallback=bool(request.get("cpu_fallback")))
    write_json(job.spec, spec)
    secrets = request.get("secrets") or {}
    if secrets:
        write_json(job.secrets, secrets, mode=0o600)
    with locks.job_lock(job.path):
        job.write_status({"job_id": job_id, "name": spec["name"], "project": project, "state": "queued",
                          "submitted_at": now(), "attempt": 0, "host": request.get("host"), **carried})
        if carried:
            job.event("moved", **{k: v for k, v in carried["moves"][-1].items() if k != "t"})
        else:
            job.event("submitted")
        try:
            jobindex.add(root, job_id, spec["name"], job.status().get("submitted_at") or now())
        except OSError:  # a full disk: the next read adds the folder from its status.json
            pass
        pid = start_supervisor(root, job)
        record_supervisor(job, pid)
    return {"job_id": job_id, "state": "queued", "job_dir": str(job.path), "supervisor_pid": pid}


def _data_view(root: Root, project: str, spec: Dict[str, Any], job: JobDir, carried: bool) -> None:
    """The job's own view of its ``data:`` (remote/data/datastore.py): what this submit synced, for its whole life."""
    from remote.data import datastore
    from remote.data.transfer import hash_cache

    dsts = [str(d) for d in spec.get("data") or [] if isinstance(d, str)]
    try:
        datastore.build_view(root.root, project, dsts, job.path, hash_cache(root.root))
    except OSError as e:
        if not carried:  # a moved job's files stay for the next adopt
            shutil.rmtree(str(job.path), ignore_errors=True)
        raise AgentError("could not make the job's data view under {}: {}".format(job.path, e),
                         "free space on the instance (gpujob doctor), then submit again", "data_view") from None


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


def _interpreter_or_refuse(root: Root, project: str, spec: Dict[str, Any], request: Dict[str, Any]) -> None:
    """Refuse a job whose run: interpreter is not on the job PATH, giving the sync lease back."""
    from remote.env import interpreter

    try:
        interpreter.check(root, spec, request.get("host_env") or {})
    except AgentError:
        lease = request.get("lease")
        if lease:
            with locks.project_locked(root.root, project):
                locks.release(root.root, project, lease)
        raise


def all_job_ids(root: Root) -> List[str]:
    """Every job, in submit order (from the job index: no status.json is read)."""
    return jobindex.read(root)[0]


def resolve(root: Root, ref: str) -> str:
    """A job id from an id, a unique prefix, or a job name (its newest job)."""
    if not ref.strip():  # an empty reference would be a prefix of every id
        raise AgentError("no job given", "name a job: gpujob ls lists them", "not_found")
    ids, names, _ = jobindex.read(root)
    if ref in ids:
        return ref
    if ref in ("last", "latest", "@") and ids:
        return ids[-1]
    named = [i for i in ids if names.get(i) == ref]
    if named:
        return named[-1]
    matches = [i for i in ids if i.startswith(ref) or i.rsplit("-", 1)[-1].startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise AgentError("no job matches {!r} on this host".format(ref), "list the jobs with: gpujob ls", "not_found")
    raise AgentError("{!r} matches {} jobs: {}".format(ref, len(matches), ", ".join(matches[-5:])),
                     "give more of the id", "ambiguous")


def live_status(root: Root, job: JobDir, boot: str) -> Dict[str, Any]:
    """status.json plus what a reader concludes: ``lost`` when the supervisor is gone."""
    st = job.status()
    state = st.get("state")
    if state not in TERMINAL:
        sup = st.get("supervisor_pid")
        stale = now() - float(st.get("heartbeat") or st.get("submitted_at") or 0) > stale_after()
        rebooted = bool(st.get("boot_id")) and st.get("boot_id") != boot
        # a named supervisor (submit and resume name the one they start) that is gone and holds
        # no lock is proof (a kill -9): no need to wait for the heartbeat to age
        if rebooted or ((stale or bool(sup)) and not procs.belongs_to(sup, job.id) and not locks.supervisor_alive(job.path)):
            st["state"] = "lost"
            st["lost_reason"] = "the instance rebooted" if rebooted else "the agent is gone (stale heartbeat)"
            left = [] if rebooted else sorted(procs.job_pids(job.id, job_dir=str(job.path)))
            if left:
                st["lost_reason"] += "; {} process(es) of the job still run: stop ends them, resume restarts " \
                                     "from the newest checkpoint".format(len(left))
        elif stale and sup and procs.belongs_to(sup, job.id):  # alive but silent: "running" alone would hide that nothing records the job's end
            st["supervisor_note"] = supervisor_silent(st, sup)
    return st


def supervisor_silent(st: Dict[str, Any], sup: Any) -> str:
    """What status says of a supervisor that lives but has written no heartbeat for a while."""
    from remote.stopping.find import frozen

    how = frozen(sup)
    how = "is " + how if how else "has written no heartbeat for {:.0f} s (a full disk, or stuck)".format(
        now() - float(st.get("heartbeat") or st.get("submitted_at") or 0))
    return "its supervisor (pid {}) {}: the job's end, restarts and autostop are not recorded until it goes on; " \
           "gpujob stop ends the job (the stop command acts itself)".format(sup, how)


def attempt_start(st: Dict[str, Any]) -> float:
    """When the current attempt started, once there was an earlier one (0: every record counts)."""
    attempts = st.get("attempts") or []
    return float(attempts[-1].get("started_at") or 0) if len(attempts) > 1 else 0.0


def this_attempt(st: Dict[str, Any], rec: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """``rec`` if the current attempt wrote it: a restarted job shows no metrics of a killed attempt."""
    t = rec.get("t") if isinstance(rec, dict) else None
    return None if isinstance(t, (int, float)) and t < attempt_start(st) else rec


def recent_metrics(st: Dict[str, Any], path: Path, n: int = 20) -> Optional[Dict[str, Any]]:
    """The newest value of each key over the last ``n`` records the current attempt wrote: one record
    alone often lacks the loss (a bar's record, an eval or learning-rate line printed last)."""
    out = None  # type: Optional[Dict[str, Any]]
    for line in tail_lines(path, n, 16384):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and this_attempt(st, rec) is not None:
            out = dict(out or {})
            out.update(rec)
    return out


def describe(root: Root, job_id: str, detail: bool = False) -> Dict[str, Any]:
    """The job's status as readers show it. A record no writer of ours made (a hand edit, a
    damaged file) is refused naming the job, not met as an "agent error" halfway through."""
    try:
        return _describe(root, job_id, detail)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError) as e:
        import traceback

        agent_log(root, "job {}: damaged record: {}\n{}".format(job_id, e, traceback.format_exc()))
        raise AgentError("the record of job {} is damaged ({}: {})".format(job_id, type(e).__name__, e),
                         "gpujob rm {} --force removes it (its files: {})".format(job_id, root.job(job_id).path),
                         "damaged") from None


def _describe(root: Root, job_id: str, detail: bool = False) -> Dict[str, Any]:
    job = root.job(job_id)
    st = live_status(root, job, procs.boot_id())
    st["job_id"] = job_id  # the folder's name, whatever a damaged or hand-edited record says
    try:
        st["log_size"] = job.log.stat().st_size
    except OSError:
        st["log_size"] = 0
    from remote.ckpt import disk

    low = disk.report(root.root)
    if low:
        st["disk"] = low
    from remote.metrics import metricsrc

    source, metrics = metricsrc.active(job)
    st["last_metrics"] = recent_metrics(st, metrics)
    if not detail and st.get("state") == "running" and source in (None, "log"):  # ls: the log's newest step, as
        # status shows it, from a bounded tail (a metrics file or events are read whole, not lagging)
        last, _, took = metricsrc.with_unread(job, job.spec_data(), source, st["last_metrics"] or {}, metricsrc.LS_TAIL)
        if took:
            st["last_metrics"], source = last, source or "log"
    st["metrics_source"] = source
    st["last_line"] = (tail_lines(job.log, 1) or [""])[0][-200:]
    if st.get("state") == "running":  # GPU use for every row of ls (the dashboard's table): the newest sample
        from remote.host import gpus

        sample = gpus.latest(job.gpu, max(attempt_start(st), float(st.get("started_at") or 0)))
        if sample:
            st["gpu_now"] = sample
    mirror = read_json(job.path / "mirror.json")  # the supervisor's mirror thread (remote/mirror)
    if isinstance(mirror, dict):
        st["mirror"] = mirror
    st["now"] = now()
    if st.get("state") == "lost" and job.status().get("state") not in TERMINAL:
        mark_lost(root, job, st)  # the record stops claiming to run
    if st.get("state") == "queued" and st.get("waiting_for_gpus"):
        from remote.host import gpus

        st["queue_position"] = gpus.position(root, job_id)
    from remote.view import cost

    spec = job.spec_data()
    st["billing"] = cost.estimate(st, spec, metrics, st["now"], metricsrc.progress(job))
    if st.get("state") not in TERMINAL:
        from remote.stopping import after

        pending = after.describe(job, job.ckpt, spec.get("checkpoint_pattern"),
                                 lambda: procs.job_pids(job.id, job_dir=str(job.path)))
        if pending:
            st["stop_after_checkpoint"] = pending
    if detail:
        st["spec"] = {k: v for k, v in job.spec_data().items() if k not in ("host_env",)}
        hp = hparams(job)
        if hp:
            st["hparams"] = hp
        if st.get("state") in ("failed", "restarting"):
            from remote.run import diagnose

            if st.get("diagnosis"):  # the supervisor's, from the attempt's end (what the log says too)
                pass
            elif st.get("exit_code") is None and st.get("reason"):  # it never ran: the agent said why
                st["diagnosis"] = {"cause": "not_started", "summary": st["reason"], "where": None, "line": None,
                                   "remedy": st.get("remedy") or "see the agent's log: gpujob agent-log HOST",
                                   "gpu": False}
            else:
                st["diagnosis"] = diagnose.diagnose(job.log, st.get("exit_code"), metrics=metrics)
            st["log_tail"] = screen_lines(job.log, 20)
        st["checkpoints"] = checkpoint_list(job, spec, live=st.get("state") not in TERMINAL or st.get("state") == "lost")
        stray = stray_checkpoints(job, spec, st)
        if stray:
            st["stray_checkpoints"] = stray
        found = artifacts(job, st)
        if found:
            st["artifacts"] = found
    return st


HPARAMS = "hparams.json"  # beside GPUJOB_METRICS_FILE: a Trainer's arguments, written by the autohook


def hparams(job: JobDir) -> Dict[str, Any]:
    """The hyperparameters the training code reported (HF TrainingArguments, Lightning hparams):
    passed through to the laptop's run ledger; scalars only, {} when none or damaged."""
    try:
        with open(str(job.path / HPARAMS)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {str(k): v for k, v in doc.items() if isinstance(v, (int, float, str, bool)) or v is None}


def stray_checkpoints(job: JobDir, spec: Dict[str, Any], st: Dict[str, Any]) -> Optional[Dict[str, str]]:
    """{dir, advice} when the job wrote checkpoints where gpujob does not look (in its code outside
    ``checkpoint.dir``: an HF ``output_dir="out"``; deeper below the checkpoint folder than discovery
    looks), else None."""
    try:
        from remote.ckpt import checkpoints

        rel = checkpoints.stray_dir(job.code, float(st.get("started_at") or st.get("submitted_at") or 0),
                                    job.ckpt, spec.get("checkpoint_pattern"))
    except (ImportError, OSError):
        return None
    return {"dir": rel, "advice": checkpoints.stray_advice(rel)} if rel else None


def artifacts(job: JobDir, st: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Model files the job wrote in its code folder that are no checkpoint (``mnist_cnn.pt`` saved at
    the end): ``pull --latest`` brings them when the job has no complete checkpoint."""
    try:
        from remote.ckpt import checkpoints

        return checkpoints.artifacts(job.code, float(st.get("started_at") or st.get("submitted_at") or 0),
                                     job.ckpt, (job.spec_data() or {}).get("checkpoint_pattern"))
    except (ImportError, OSError):
        return []


def checkpoint_list(job: JobDir, spec: Dict[str, Any], live: bool) -> List[Dict[str, Any]]:
    """The job's checkpoints of every kind, oldest first: {name (under ckpt/), kind, step, complete, ...}.

    Only a job that may still run has processes whose open files count as "being written"."""
    try:
        from remote.ckpt import checkpoints

        pids = (lambda: procs.job_pids(job.id, job_dir=str(job.path))) if live else []
        return [c.as_dict(job.ckpt) for c in checkpoints.find(job.ckpt, spec.get("checkpoint_pattern"), pids)]
    except (ImportError, OSError):
        return []


def mark_lost(root: Root, job: JobDir, st: Dict[str, Any]) -> None:
    """Persist a ``lost`` conclusion (so the record stops claiming to run)."""
    try:
        with locks.job_lock(job.path):
            fresh = job.status()  # judged again under the lock: a resume may have just restarted it
            if fresh.get("state") not in TERMINAL and live_status(root, job, procs.boot_id()).get("state") == "lost":
                fresh.update(state="lost", lost_reason=st.get("lost_reason"), ended_at=now())
                job.write_status(fresh)
                job.event("state", state="lost", reason=st.get("lost_reason"))
    except OSError as e:  # a full disk: the reader still gets its answer, the record waits
        agent_log(root, "could not record {} as lost: {}".format(job.id, e))


def resume(root: Root, job_id: str) -> Dict[str, Any]:
    """Restart a lost, stopped or failed job under the same id, from its newest complete checkpoint."""
    job = root.job(job_id)
    with locks.job_lock(job.path, removed_is_error=True):  # a second resume waits here, then finds the job running
        st = live_status(root, job, procs.boot_id())
        if st.get("state") == "moved":
            raise AgentError("job {} moved to {}: it goes on there".format(job_id, st.get("moved_to")),
                             "gpujob resume {} (the laptop knows its new host)".format(job_id), "moved")
        if locks.supervisor_alive(job.path) and st.get("state") in TERMINAL and \
                (read_json(job.path / "mirror.json") or {}).get("ending"):
            raise AgentError("job {} ended ({}) and its supervisor is still sending the last checkpoint to the "
                             "mirror".format(job_id, st.get("state")),
                             "gpujob status {} shows the upload; resume once it is mirrored (checkpoint.mirror.wait "
                             "bounds the wait)".format(job_id), "already_running")
        if locks.supervisor_alive(job.path) or st.get("state") not in TERMINAL:
            raise AgentError("job {} is already running ({}): its supervisor is alive".format(
                job_id, st.get("state")), "follow it with: gpujob tail -f {}".format(job_id), "already_running")
        if st.get("state") == "succeeded":
            raise AgentError("job {} has succeeded: only a lost, stopped or failed job can be resumed".format(job_id),
                             "see gpujob status {}".format(job_id), "bad_state")
        no_gpus = gpus_lacking(job)
        if no_gpus:  # refused before anything changes: the job stays as it was, resumable later
            raise AgentError("job {} was not resumed: {}".format(job_id, no_gpus),
                             "power the instance on with its GPUs (gpujob doctor shows them), then resume again; "
                             "or continue it on another host: gpujob move {} --to HOST".format(job_id), "no_gpus")
        procs.kill_tree(job_id, None, 5.0, job_dir=str(job.path))
        for p in (job.stop_file, Path(str(job.stop_file) + ".watch"), Path(str(job.stop_file) + ".acted"),
                  Path(str(job.stop_file) + ".ended"), job.path / "stop.after"):
            try:
                p.unlink()
            except OSError:
                pass
        fresh = job.status()
        # the ended run's, not this one's (its supervisor too: until the new one is named, the
        # heartbeat's age decides)
        for k in ("lost_reason", "diagnosis", "remedy", "killed", "stopping", "supervisor_pid"):
            fresh.pop(k, None)
        fresh.update(state="queued", resumed_at=now(), ended_at=None, exit_code=None, reason=None,
                     restart_base=int(fresh.get("attempt") or 0), heartbeat=now(), boot_id=procs.boot_id())
        jobindex.mark(root, [job_id], False)  # first: a full disk refusing it leaves the job as it was
        job.write_status(fresh)
        job.event("resumed", previous=st.get("state"))
        pid = start_supervisor(root, job)
        record_supervisor(job, pid)
    agent_log(root, "resumed {} (supervisor {})".format(job_id, pid))
    doc = {"job_id": job_id, "state": "queued", "supervisor_pid": pid, "previous": st.get("state")}
    doc.update(resume_point(job))
    return doc


def resume_point(job: JobDir) -> Dict[str, Any]:
    """What a restart hands the run command as GPUJOB_RESUME: {resume_from: the newest complete checkpoint
    (under ckpt/) or None, incomplete: why the newest others are not (only when none is complete)}."""
    from remote.ckpt import keepcopy

    try:  # a file rewritten in place and cut short: the supervisor puts its kept copy back first
        kept = keepcopy.stand_ins(job.path)
    except OSError:
        kept = {}
    found = checkpoint_list(job, job.spec_data(), live=False)
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

    spec = job.spec_data()
    n = gpus.wanted(spec)
    if n is None:
        return ""
    prefix = (spec.get("host_env") or {}).get("GPUJOB_PATH_PREFIX") or os.environ.get("GPUJOB_PATH_PREFIX", "")
    found, error = gpus.probe(prefix)
    return gpus.lacking(found, error, n)


def wait_started(job: JobDir, timeout: float = 5.0) -> Optional[Dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = job.status()
        if st.get("state") != "queued" or st.get("waiting_for_gpus"):  # started, or in the GPU queue
            return st
        time.sleep(0.05)
    return None
