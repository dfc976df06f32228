"""Stop at the next checkpoint (issue 30): most plain training loops save every N steps and not
on a signal, so a stop at once loses the work since the last save. ``stop --after-checkpoint``
(and ``stop: {mode: checkpoint}`` for auto-stop and ``move``) writes ``<job>/stop.after``; the
supervisor's watcher then waits for a complete checkpoint newer than the request (judged by
remote/ckpt/checkpoints.py as everywhere) and stops the job at once; past ``max_wait`` it stops as
a plain stop would and says how much work since the last checkpoint is lost.
"""

import json
from pathlib import Path
from typing import Any, List, Mapping, Optional, TypedDict

from remote.core.jsontypes import is_object
from remote.core.layout import JobDir, now, with_reserve
from remote.core.spec import JobSpec

TICK = 1.0  # seconds between looks at the checkpoint folder
DEFAULT_MAX_WAIT = 1200.0  # without a known interval between checkpoints
# Once the checkpoint asked for is complete nothing is left to save: the job gets this long (or its
# stop grace, if shorter) to leave on the stop file or its signal, then SIGKILL. The whole grace was
# GPU time spent on steps a SIGKILL then threw away (a loop deaf to SIGTERM trained 400 more).
LANDED_GRACE = 3.0


def auto_max_wait(ckpt_dir: Path, pattern: Optional[str], pids: Any) -> float:
    """How long to wait when nobody said: twice the usual time between the job's checkpoints (at
    least a minute), else 20 min."""
    every = interval(_complete(ckpt_dir, pattern, pids))
    return max(2 * every, 60.0) if every else DEFAULT_MAX_WAIT


class StopRequest(TypedDict, total=False):
    """``<job>/stop_after.json``: a stop waiting for the next complete checkpoint."""
    requested_at: float
    reason: str
    max_wait_auto: bool  # max_wait is auto_max_wait's, nobody gave one
    max_wait: float


def request(job: JobDir, max_wait: Optional[float], reason: str, ckpt_dir: Optional[Path] = None,
            pattern: Optional[str] = None, pids: Any = None) -> "StopRequest":
    """Ask for a stop at the next complete checkpoint (a second request keeps the first's time);
    ``max_wait`` None: :func:`auto_max_wait`."""
    doc = pending(job)
    if doc is None:
        doc = {"requested_at": now(), "reason": reason, "max_wait_auto": max_wait is None,
               "max_wait": float(max_wait) if max_wait is not None else
               auto_max_wait(ckpt_dir or job.ckpt, pattern, pids)}
    with_reserve(lambda: job.stop_after.write_text(json.dumps(doc)))
    job.event("stop_after_checkpoint", max_wait=doc["max_wait"], reason=reason)
    return doc


def saves(ckpt_dir: Path, pattern: Optional[str], pids: Any) -> bool:
    """Whether the job wrote a complete checkpoint: a budget stop then waits for its next one (the money
    goes on the work since the last save either way); one that never saves would only spend more."""
    return bool(_complete(ckpt_dir, pattern, pids))


def pending(job: JobDir) -> Optional["StopRequest"]:
    try:
        doc = json.loads(job.stop_after.read_text())
    except (OSError, ValueError):
        return None
    return doc if is_object(doc) and isinstance(doc.get("requested_at"), (int, float)) else None  # ours (request)


def clear(job: JobDir) -> None:
    try:
        job.stop_after.unlink()
    except OSError:
        pass


def _complete(ckpt_dir: Path, pattern: Optional[str], pids: Any) -> List[Any]:
    try:
        from remote.ckpt import checkpoints

        return [c for c in checkpoints.find(ckpt_dir, pattern, pids) if c.complete]
    except (ImportError, OSError):
        return []


def interval(done: List[Any]) -> Optional[float]:
    """The usual time between two complete checkpoints (the median of the last few), or None."""
    times = sorted(c.mtime for c in done)[-6:]
    gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
    import statistics  # with fractions and decimal: a status shows a pending stop without it

    return statistics.median(gaps) if gaps else None


def describe(job: JobDir, ckpt_dir: Path, pattern: Optional[str], pids: Any) -> Optional[Mapping[str, object]]:
    """What ``status`` shows of a pending request: {requested_at, max_wait, last, last_at, every_s}."""
    req = pending(job)
    if not req:
        return None
    done = _complete(ckpt_dir, pattern, pids)
    out = dict(req)
    if done:
        out.update(last=done[-1].name, last_at=done[-1].mtime)
    every = interval(done)
    if every:
        out["every_s"] = round(every, 1)
    return out


def _ago(s: float) -> str:
    return "{:.0f} s".format(s) if s < 120 else "{:.0f} min".format(s / 60)


class Watch:
    """A supervisor watcher: the stop reason once a new complete checkpoint landed or max_wait ran out.

    ``ctx`` gives what it needs of the supervisor (remote/run/watchers.py's JobContext): the job's
    pids, its status, its spec and the log's markers."""

    name = "stop after checkpoint"
    interval = TICK

    def __init__(self, job: JobDir, ckpt_dir: Path, pattern: Optional[str], ctx: Any) -> None:
        self.job, self.ckpt_dir, self.pattern, self.ctx, self.next_at = job, ckpt_dir, pattern, ctx, 0.0
        self.landed = False  # the stop it asked for follows a complete checkpoint: a short grace (LANDED_GRACE)

    def tick(self, clock: float) -> Optional[str]:
        """``clock``: time.monotonic() of the supervisor's turn (the request's times are wall times: now())."""
        if clock < self.next_at:
            return None
        self.next_at = clock + TICK
        req = pending(self.job)
        if not req:
            return None
        ctx = self.ctx
        done = _complete(self.ckpt_dir, self.pattern, ctx.job_pids)
        reason = str(req.get("reason") or "stopped by user")
        if done and done[-1].mtime > float(req["requested_at"]):
            clear(self.job)
            self.landed = True
            ctx.log_marker("stop: checkpoint {} is complete ({} after the request): stopping now; nothing is left "
                           "to save, so what has not left within {:g} s gets SIGKILL".format(
                               done[-1].name, _ago(done[-1].mtime - float(req["requested_at"])),
                               min(LANDED_GRACE, JobSpec.of(ctx.spec).stop.grace)))
            return "{} (after checkpoint {})".format(reason, done[-1].name)
        if now() - float(req["requested_at"]) < float(req.get("max_wait") or 0):
            return None
        clear(self.job)
        since = done[-1].mtime if done else float(ctx.status.started_at or now())
        lost = "the work since the last checkpoint ({}, {} ago) is lost".format(done[-1].name, _ago(now() - since)) \
            if done else "no checkpoint was ever written: all {} of work is lost".format(_ago(now() - since))
        ctx.log_marker("stop: no new checkpoint within {}: stopping anyway; {}".format(
            _ago(float(req.get("max_wait") or 0)), lost))
        return "{} (no new checkpoint within {}: {})".format(reason, _ago(float(req.get("max_wait") or 0)), lost)
