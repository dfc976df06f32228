"""Job events → notifications, sent by the agent (standard library only).

The supervisor calls ``Notifier.emit(kind, ...)`` at started / restarted / succeeded /
failed / stopped / autostopped; sends run one at a time in a background thread so the loop never
blocks. ``Notifier.flush()`` waits for every send to be delivered or to have spent its
retries (the power-off waits on it).

``lost`` cannot come from the supervisor that died: ``remote/jobs/lost.py`` finds each job lost and
not announced yet on the agent's next start (any verb, or the idle watcher) and hands it to a
detached ``notify_lost``, which sends it from here.
"""

import os
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from remote.core.jobrecord import JobRecord, RecordLike
from remote.core.layout import JobDir, Root, agent_log, now, screen_lines
from remote.core.protocol import ENDINGS
from remote.core.spec import JobSpec, SpecLike

if TYPE_CHECKING:
    from remote.notify.send import Outcome

TB_ENV = ("AutoDLService6006URL", "AUTODL_SERVICE_6006_URL")


def _notify():
    from remote import notify

    return notify


def tensorboard_url(spec: SpecLike) -> Optional[str]:
    """AutoDL's custom-service URL for port 6006, when this instance has one."""
    spec = JobSpec.of(spec)
    env = dict(os.environ)
    env.update(spec.host_env)
    for k in TB_ENV:
        if env.get(k):
            return env[k]
    return None


def build_event(kind: str, job: JobDir, spec: SpecLike, status: RecordLike, **extra: Any) -> Dict[str, object]:
    """The event dict ``notify.render`` turns into a message: job, host, duration, cost, metrics, TB URL."""
    spec = JobSpec.of(spec)
    status = JobRecord.of(status)
    t = now()
    started = status.started_at or status.submitted_at
    ended = status.ended_at or t
    duration = max(0.0, float(ended) - float(started)) if started else None
    price = spec.price_per_hour
    cost = round(duration / 3600.0 * float(price), 4) if duration is not None and price else None
    from remote.metrics import metricsrc

    source, path = metricsrc.active(job)
    metrics = metricsrc.latest(path)  # the newest loss and the newest eval metrics, from lines of their own
    metrics = {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool)) and k != "t"}
    ev = {
        "event": kind,
        "job_id": job.id,
        "name": spec.name or status.name,
        "host": spec.host or status.host,
        "state": status.state,
        "attempt": status.attempt,
        "duration_s": round(duration, 1) if duration is not None else None,
        "cost": cost,
        "currency": spec.currency if cost is not None else None,
        "metrics": metrics,
        "metrics_source": source,
        "tb_url": tensorboard_url(spec),
        "time": t,
    }  # type: Dict[str, object]
    if kind == "failed":
        try:
            from remote.run import diagnose

            d = diagnose.diagnose(job.log, status.exit_code)
            ev["diagnosis"] = d.get("summary") or d.get("cause")
            ev["remedy"] = d.get("remedy")
        except Exception:
            pass
        ev["log_tail"] = screen_lines(job.log, 20)
    ev.update({k: v for k, v in extra.items() if v is not None})
    return ev


class Notifier:
    """Sends a job's events in order from one background thread; never raises."""

    def __init__(self, root: Root, job: JobDir, spec: SpecLike, retries: int = 3, backoff: float = 1.0,
                 timeout: float = 10.0) -> None:
        self.root, self.job, self.spec = root, job, JobSpec.of(spec)
        self.cfg = self.spec.notify.doc
        self.retries, self.backoff, self.timeout = retries, backoff, timeout
        self.q = queue.Queue()  # type: queue.Queue
        self.thread = None  # type: Optional[threading.Thread]
        self.sent = []  # type: List[Mapping[str, object]]

    @property
    def enabled(self) -> bool:
        return self.spec.notify.enabled

    def _log(self, line: str) -> None:
        try:
            with open(str(self.job.supervisor_log), "a") as f:
                f.write("{} {}\n".format(time.strftime("%Y-%m-%d %H:%M:%S"), line))
        except OSError:
            pass

    def emit(self, kind: str, status: JobRecord, **extra: Any) -> None:
        """Queue ``kind`` (its dict is built now, from the job's current files)."""
        if not self.enabled:
            return
        try:
            notify = _notify()
            if not any(notify.wants(self.cfg, kind, c) for c in self.spec.notify.channels):
                return
            ev = build_event(kind, self.job, self.spec, status.copy(), **extra)
        except Exception as e:
            self._log("notify {}: could not build the event: {}".format(kind, type(e).__name__))
            return
        self.q.put(ev)
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._work, name="gpujob-notify", daemon=True)
            self.thread.start()

    def _work(self) -> None:
        while True:
            try:
                ev = self.q.get(timeout=0.5)
            except queue.Empty:
                return
            try:
                self.send_now(ev)
            except Exception as e:  # never let one event end the sender
                self._log("notify {}: {}".format(ev.get("event"), type(e).__name__))
            finally:
                self.q.task_done()

    def send_now(self, ev: Mapping[str, object]) -> "List[Outcome]":
        outcomes = _notify().notify_event(self.cfg, ev, self.job.secrets_data(), str(self.root.root), log=self._log,
                                          retries=self.retries, backoff=self.backoff, timeout=self.timeout)
        summary = [{k: o.get(k) for k in ("channel", "ok", "skipped", "attempts", "status", "error")} for o in outcomes]
        try:
            self.job.event("notified", about=ev.get("event"), outcomes=summary)
        except (OSError, TypeError, ValueError):
            pass
        self.sent.append(ev)
        return outcomes

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Wait until every queued event is delivered or has spent its retries."""
        if timeout is None:
            n = max(1, len(self.spec.notify.channels))
            timeout = n * (self.retries + 1) * (self.timeout + self.backoff * 2 ** self.retries) + 5
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.q.unfinished_tasks == 0:
                return True
            time.sleep(0.05)
        return False


# ---- lost jobs (found by remote/jobs/lost.py) ----------------------------------------------------

def notify_lost(root: Root, job_id: str) -> Mapping[str, object]:
    """Send ``lost`` for one job (the ``notify-lost`` verb)."""
    from remote.core import procs
    from remote.jobs import store as jobs

    job = root.job(job_id)
    st = jobs.live_status(root, job, procs.boot_id())
    spec = job.job_spec()
    n = Notifier(root, job, spec)
    ev = build_event("lost", job, spec, st, reason=st.lost_reason)
    outcomes = n.send_now(ev)  # notify_event applies on:
    return {"job_id": job_id, "sent": len(outcomes), "ok": sum(1 for o in outcomes if o.get("ok"))}


# ---- the supervisor's hooks (each never raises; ``ctx``: remote.run.watchers.JobContext) -------------

def attach(ctx: Any, watchers: Any) -> None:
    """Give a supervisor's job its notifier and, when the spec has policies, its auto-stop watcher (last)."""
    try:
        ctx.notifier = Notifier(ctx.root, ctx.job, ctx.spec)
    except Exception as e:
        agent_log(ctx.root, "notifier for {} not started: {}".format(ctx.job.id, e))
    try:
        from remote.run import autostop

        watchers.add(autostop.watcher(ctx))
    except Exception as e:
        agent_log(ctx.root, "auto-stop for {} not started: {}".format(ctx.job.id, e))


def emit(ctx: Any, kind: str, **extra: Any) -> None:
    """Queue a notification of ``kind`` for the supervisor's job (background send)."""
    n = getattr(ctx, "notifier", None)
    if n is not None:
        try:
            n.emit(kind, ctx.status, **extra)
        except Exception:
            pass


def on_finish(ctx: Any, state: str) -> None:
    """The job ended: send the last notification, wait for it, then power off when asked."""
    kind = state if state in ENDINGS else None  # each way a run ends is announced under its own name
    if kind:
        emit(ctx, kind, reason=ctx.status.reason if kind != "succeeded" else None)
    n = getattr(ctx, "notifier", None)
    if n is not None:
        n.flush()
    if getattr(ctx, "mirror", None) is not None:  # the last checkpoint leaves before the power does
        try:
            ctx.mirror.at_end()
        except Exception as e:
            agent_log(ctx.root, "mirror at the end of {} failed: {}".format(ctx.job.id, e))
    try:
        from remote.run import power

        power.after_job(ctx.root, ctx.job, ctx.spec, state, tick=ctx.heartbeat)
    except Exception as e:
        agent_log(ctx.root, "power-off after {} failed: {}".format(ctx.job.id, e))


def started(ctx: Any) -> None:
    """``started`` once per supervisor run (its first attempt); later attempts are ``restarted``."""
    if not getattr(ctx, "_announced_start", False):
        ctx._announced_start = True
        emit(ctx, "started")
