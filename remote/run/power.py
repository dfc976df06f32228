"""Powering the instance off (standard library only).

* After a job, with ``autostop: {after: shutdown}``: the supervisor calls :func:`after_job`
  once the final checkpoint is written and the last notification is delivered (or its
  retries are spent); with ``pull_before_shutdown`` it first waits for the ``pulled``
  marker that ``gpujob pull`` leaves through the ``pulled`` verb.
* Host-level ``idle_shutdown``: a small detached watcher (``idle-watch`` verb) powers the
  instance off when no job runs or waits and no interactive SSH session is open.

The command is the host profile's ``shutdown_command`` (spec.json, or the watcher's own).
"""

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional

from remote.core import layout, procs
from remote.core.layout import JobDir, Root, agent_log, now, read_json, write_json
from remote.core.spec import JobSpec, SpecLike
from remote.jobs import lost

PULLED = "pulled"
IDLE_FILE = "idle-watch.json"


def run_shutdown(root: Root, command: Optional[str], why: str) -> Mapping[str, object]:
    """Run the shutdown command now; logs it to the agent log. Never raises."""
    if not command:
        agent_log(root, "shutdown wanted ({}) but the host has no shutdown_command".format(why))
        return {"ran": False, "error": "no shutdown_command"}
    agent_log(root, "shutdown ({}): running the host's shutdown command".format(why))
    limit = float(os.environ.get("GPUJOB_SHUTDOWN_TIMEOUT", "120"))
    import subprocess  # here and below: every verb's start imports this module (revive_idle_watch)

    try:  # its own session: a command that hangs is ended with every process it started
        p = subprocess.Popen(["bash", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        agent_log(root, "shutdown command failed: {}".format(e))
        return {"ran": False, "error": str(e)}
    try:
        out_b, _ = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        procs.end(lambda sig: procs.signal_group(p.pid, sig), lambda: procs.group_alive(p.pid), 1.0, 1.0, p.poll)
        p.wait()
        agent_log(root, "shutdown command gave no answer in {:.0f} s: ended with its processes".format(limit))
        return {"ran": False, "error": "no answer in {:.0f} s".format(limit)}
    out = out_b.decode("utf-8", "replace")[-500:]
    if p.returncode != 0:
        agent_log(root, "shutdown command exited {}: {}".format(p.returncode, out))
    return {"ran": True, "rc": p.returncode}


def mark_pulled(job: JobDir) -> Mapping[str, object]:
    """The ``pulled`` verb: ``gpujob pull`` says it has the job's files."""
    try:
        (job.path / PULLED).write_text(str(now()))
    except OSError as e:  # a full disk: the pull itself succeeded; only the marker is missing
        return {"job_id": job.id, "pulled": False, "error": str(e)}
    job.event("pulled")
    return {"job_id": job.id, "pulled": True}


def wait_pulled(job: JobDir, timeout: float, tick: Optional[Callable[[], None]] = None,
                after: float = 0.0) -> bool:
    """Wait up to ``timeout`` seconds for a ``pulled`` marker written at ``after`` or later
    (a pull made while the job still ran lacks its final checkpoint)."""
    deadline = time.time() + timeout
    while True:
        try:
            if float((job.path / PULLED).read_text().strip() or 0) >= after:
                return True
        except (OSError, ValueError):
            pass
        if time.time() >= deadline:
            return False
        if tick:
            tick()
        time.sleep(0.5)


def after_job(root: Root, job: JobDir, spec: SpecLike, state: str,
              tick: Optional[Callable[[], None]] = None) -> Optional[Mapping[str, object]]:
    """Power off after a job when ``autostop.after`` is ``shutdown`` (not after a user's stop)."""
    spec = JobSpec.of(spec)
    if not spec.autostop.shutdown or state == "stopped":
        return None
    if spec.slurm.on:  # a compute node is the cluster's: the allocation ends with the job, nothing to power off
        job.event("power_off_skipped", why="a Slurm job's node is released by Slurm when the job ends")
        return None
    wait = spec.autostop.pull_wait
    if wait > 0:
        job.event("waiting_for_pull", timeout_s=wait)
        ended = job.record().ended_at or now()
        got = wait_pulled(job, wait, tick, after=float(ended))
        job.event("pull_wait_done", pulled=got)
    if busy(root, exclude=job.id):
        job.event("shutdown_skipped", reason="another job is running or waiting")
        agent_log(root, "job {} ended ({}): shutdown skipped, another job runs".format(job.id, state))
        return {"ran": False, "error": "another job runs"}
    job.event("shutdown", state=state)
    return run_shutdown(root, spec.shutdown_command, "job {} {}".format(job.id, state))


# ---- idle ------------------------------------------------------------------------------------

def syncing(root: Root) -> bool:
    """Whether a submit (or a move) is sending code to this host now: its project's sync lease is live.
    Its job does not exist yet; a power-off would cut the upload and the job it is for."""
    projects = root.root / "projects"
    for lease in projects.glob("*/sync.lease") if projects.is_dir() else []:
        until = read_json(lease, {}) or {}
        if isinstance(until, dict) and isinstance(until.get("until"), (int, float)) and until["until"] > time.time():
            return True
    return False


def busy(root: Root, exclude: Optional[str] = None) -> bool:
    """Whether any job (other than ``exclude``) runs or waits (queued, restarting), or a submit is on its way."""
    from remote.core import procs
    from remote.jobs import store as jobs

    if syncing(root):
        return True
    if not root.jobs.is_dir():
        return False
    boot = procs.boot_id()
    for p in root.jobs.iterdir():
        if p.name == exclude or not (p / "status.json").exists():
            continue
        if jobs.judged(root, root.job(p.name), boot)[1].working:  # a lost job whose trainer goes on too
            return True
    return False


def interactive_sessions() -> List[str]:
    """Open interactive SSH sessions: sshd processes that hold a tty (``sshd: user@pts/0``).

    The agent's own connections run commands without a tty (``user@notty``) and do not count.
    ``who`` (utmp) is read too where it works.
    """
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            args = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        if args.startswith("sshd:") and "@pts/" in args:
            found.append(args)
    import subprocess

    try:
        out = subprocess.run(["who"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=5).stdout
        for line in out.decode("utf-8", "replace").splitlines():
            if "pts/" in line and line not in found:
                found.append("who: " + line.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    extra = os.environ.get("GPUJOB_IDLE_SESSION_FILE")  # a stand-in for sessions, in tests
    if extra and os.path.exists(extra):
        found.append("session file " + extra)
    return found


def idle_watch(root: Root, minutes: float, command: Optional[str], poll: float = 30.0) -> int:
    """The detached watcher's loop: power off after ``minutes`` with no job and no session."""
    me = {"pid": os.getpid(), "minutes": minutes, "started_at": now()}
    write_json(root.root / IDLE_FILE, me)
    idle_since = time.time()
    agent_log(root, "idle watcher {} started: shutdown after {:g} idle minute(s)".format(os.getpid(), minutes))
    while True:
        cur = read_json(root.root / IDLE_FILE, {}) or {}
        if cur.get("pid") != os.getpid():
            return 0  # replaced or removed
        try:
            lost.spawn_lost_check(root)
        except Exception:
            pass
        if busy(root) or interactive_sessions():
            idle_since = time.time()
        elif time.time() - idle_since >= minutes * 60:
            agent_log(root, "idle for {:g} minute(s): powering off".format(minutes))
            write_json(root.root / IDLE_FILE, dict(cur, fired_at=now()))
            run_shutdown(root, command, "idle {:g} minutes".format(minutes))
            return 0
        time.sleep(poll)


def install_idle_watch(root: Root, minutes: Optional[float], command: Optional[str]) -> Mapping[str, object]:
    """Start (or replace, or with ``minutes`` None/0 remove) the detached idle watcher."""
    root.ensure()
    path = root.root / IDLE_FILE
    cur = read_json(path, {}) or {}
    if not minutes:
        if path.exists():
            path.unlink()
        return {"idle_shutdown": None, "stopped": cur.get("pid")}
    if cur.get("pid") and cur.get("minutes") == minutes and cur.get("command") == command and _alive(cur["pid"]) \
            and not cur.get("fired_at"):
        return {"idle_shutdown": minutes, "pid": cur["pid"], "already": True}
    poll = os.environ.get("GPUJOB_IDLE_POLL", "30")
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(layout.AGENT_DIR))
    log = open(str(root.agent_log), "ab")
    p = subprocess.Popen(
        [sys.executable, "-m", "remote", "--root", str(root.root), "idle_watch", "--minutes", str(minutes),
         "--poll", poll], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        close_fds=True, env=env, cwd=str(root.root),
    )
    log.close()
    assert p.stdin is not None
    p.stdin.write(json.dumps({"command": command}).encode())  # not on the command line: `ps` shows it
    p.stdin.close()
    deadline = time.time() + 5
    while time.time() < deadline and (read_json(path, {}) or {}).get("pid") != p.pid:
        time.sleep(0.05)
    from remote.core import procs

    write_json(path, dict(read_json(path, {}) or {}, command=command, boot_id=procs.boot_id()))
    return {"idle_shutdown": minutes, "pid": p.pid}


def revive_idle_watch(root: Root) -> Optional[Mapping[str, object]]:
    """Restart the idle watcher after a reboot (or a crash): the setting outlives its process.

    Called before every agent verb; costs one small file read when nothing is to be done.
    """
    cur = read_json(root.root / IDLE_FILE, None)
    if not cur or not cur.get("minutes"):
        return None
    from remote.core import procs

    same_boot = cur.get("boot_id") == procs.boot_id()
    if same_boot and (_alive(cur.get("pid")) or cur.get("fired_at")):
        return None
    agent_log(root, "idle watcher {} is gone (new boot: {}): starting it again".format(cur.get("pid"), not same_boot))
    try:
        os.unlink(str(root.root / IDLE_FILE))
    except OSError:
        pass
    return install_idle_watch(root, float(cur["minutes"]), cur.get("command"))


def _alive(pid: Any) -> bool:
    """A live, non-zombie process (a killed watcher whose parent is gone can linger as a zombie)."""
    from remote.core import procs

    try:
        return procs.pid_alive(int(pid))
    except (TypeError, ValueError):
        return False
