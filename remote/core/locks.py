"""Locks on the instance: a job's state changes, its one supervisor, a project's sync lease.

- ``job_lock``: every change of a job's state (submit, start, resume, stop, restart, the
  supervisor's own writes) happens under ``flock`` on ``<job>/job.lock``.
- ``stop_turn``: the stops under way hold ``<job>/stop.lock`` shared, a resume waits for it alone.
- ``supervisor_lock``: the supervisor holds ``<job>/supervisor.lock`` for its whole life; a
  second one (a racing ``resume``) finds it held and leaves. The kernel drops it when the
  process dies, so a reboot or a kill leaves no stale lock.
- The sync lease: the upload of a project's code goes into the shared delta base
  ``projects/<p>/code``, and the job's snapshot is taken later, by another command. A submit
  takes the project's lease with its manifest, keeps it through the upload and gives it back
  when its snapshot is taken, so no other submit of the project writes in between. A lease
  whose holder went quiet (a client killed mid-submit) expires after ``GPUJOB_SYNC_LEASE_TTL``
  seconds (60); a receive in progress keeps renewing it, and one that fails (a cut link) gives
  it back at once.
"""

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any, ContextManager, Dict, Iterator, Optional

from remote.core import atomicfile, filelock
from remote.core.errors import AgentError
from remote.core.layout import read_doc


def lease_ttl() -> float:
    """Seconds a quiet holder keeps the lease (read late: ``<root>/agent.env`` may set it)."""
    return float(os.environ.get("GPUJOB_SYNC_LEASE_TTL", "60"))


def flocked(path: Path, blocking: bool = True) -> ContextManager[bool]:
    """Hold ``flock`` on ``path`` (created if missing); yields False when ``blocking`` is off
    and someone else holds it."""
    return filelock.locked(path, blocking=blocking)


@contextlib.contextmanager
def stop_turn(job_path: Path, shared: bool, wait: float) -> Iterator[bool]:
    """``<job>/stop.lock``: each ``stop`` holds it shared while it asks and waits, a ``resume`` holds it
    alone, so a resume asked while stops are under way starts once they have answered for the run they
    stopped (never clearing their request halfway). Waits at most ``wait`` s; yields whether it got it
    (False: the caller goes on as before; a removed job or a full disk has no file to line up on)."""
    try:
        fd = os.open(str(job_path / "stop.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    try:
        deadline = time.monotonic() + wait
        got = filelock.lock(fd, shared, blocking=False)
        while not got and time.monotonic() < deadline:
            time.sleep(0.1)
            got = filelock.lock(fd, shared, blocking=False)
        yield got
    finally:
        os.close(fd)


@contextlib.contextmanager
def job_lock(job_path: Path, removed_is_error: bool = False) -> Iterator[bool]:
    """The per-job lock every state change takes. With ``removed_is_error`` (a change a user
    asked for: stop, resume, move, rm) a job removed before or while this waited is said so,
    not met as a missing file halfway through the change."""
    gone = AgentError("job {} was removed from this host".format(job_path.name),
                      "gpujob ls lists the jobs it has", "not_found")
    try:
        with flocked(job_path / "job.lock") as got:
            if removed_is_error and not (job_path / "spec.json").exists():  # rm held the lock, then took the folder
                raise gone
            yield got
    except FileNotFoundError:
        if not removed_is_error or job_path.is_dir():
            raise
        raise gone from None


def hold_supervisor(job_path: Path) -> Optional[int]:
    """Take the job's supervisor lock for this process's life: its fd, or None when another
    supervisor holds it."""
    fd = os.open(str(job_path / "supervisor.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    if not filelock.lock(fd, blocking=False):
        os.close(fd)
        return None
    return fd


def supervisor_alive(job_path: Path) -> bool:
    """Whether a supervisor holds the job's lock now (read-only: works on a full disk)."""
    try:
        return filelock.held(job_path / "supervisor.lock")
    except OSError:
        return False


# ---- the project's sync lease -------------------------------------------------------------
def _project(root: Path, project: str) -> Path:
    d = root / "projects" / project
    d.mkdir(parents=True, exist_ok=True)
    return d


def _write(lease: Path, token: str) -> None:
    # not durable: after a crash the lease only has to expire, which time does
    atomicfile.write(lease, json.dumps({"token": token, "until": time.time() + lease_ttl(), "pid": os.getpid()}),
                     durable=False)


def try_lease(root: Path, project: str, token: str) -> Optional[float]:
    """Take (or renew) the lease for ``token``: None when taken, else the seconds the current
    holder's lease has left."""
    d = _project(root, project)
    with flocked(d / ".lock"):
        cur = read_doc(d / "sync.lease")
        left = float(cur.get("until") or 0) - time.time()
        if cur.get("token") not in (None, token) and left > 0:
            return left
        _write(d / "sync.lease", token)
        return None


def take_lease(root: Path, project: str, token: str, wait: float) -> Optional[float]:
    """``try_lease``, waiting up to ``wait`` seconds for the holder to finish."""
    deadline = time.time() + wait
    while True:
        left = try_lease(root, project, token)
        if left is None or time.time() >= deadline:
            return left
        time.sleep(0.1)


def renew(root: Path, project: str, token: str) -> bool:
    """Extend ``token``'s lease; False when it is no longer ``token``'s (it expired and another
    submit took it, even if that one has given it back since: the code may have changed)."""
    d = _project(root, project)
    with flocked(d / ".lock"):
        return renew_locked(root, project, token)


def renew_locked(root: Path, project: str, token: str) -> bool:
    """``renew`` for a caller that holds ``project_locked`` (a second flock would wait on it)."""
    lease = root / "projects" / project / "sync.lease"
    if read_doc(lease).get("token") != token:
        return False
    _write(lease, token)
    return True


@contextlib.contextmanager
def lease_kept(root: Path, project: str, token: str) -> Iterator[bool]:
    """Renew the lease while a long receive runs; yields whether ``token`` still holds it
    (False: it expired and another submit took it)."""
    if not renew(root, project, token):
        yield False
        return
    import threading  # a long receive's alone: every verb's start imports this module

    done = threading.Event()

    def keep() -> None:
        while not done.wait(lease_ttl() / 3):
            renew(root, project, token)

    t = threading.Thread(target=keep, daemon=True)
    t.start()
    try:
        yield True
    except BaseException:  # a cut or refused upload: that submit stops here, the next need not wait
        done.set()
        t.join()
        give_back(root, project, token)
        raise
    finally:
        done.set()
        t.join()


@contextlib.contextmanager
def project_locked(root: Path, project: str) -> Iterator[None]:
    with flocked(_project(root, project) / ".lock"):
        yield


def release(root: Path, project: str, token: str) -> None:
    """Give the lease back (the caller holds ``project_locked``)."""
    lease = root / "projects" / project / "sync.lease"
    if read_doc(lease).get("token") == token:
        try:
            lease.unlink()
        except OSError:
            pass


def give_back(root: Path, project: str, token: str) -> None:
    """Release ``token``'s lease: its submit stopped short of a snapshot."""
    with project_locked(root, project):
        release(root, project, token)


@contextlib.contextmanager
def lease_back_on_failure(root: Path, request: Dict[str, Any]) -> Iterator[None]:
    """A submit (or a move's adopt) that fails before its snapshot gives its sync lease back:
    the project's next submit need not wait out the lease."""
    try:
        yield
    except BaseException:
        if request.get("lease"):
            give_back(root, request.get("project") or (request.get("spec") or {}).get("name") or "", request["lease"])
        raise
