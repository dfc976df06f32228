"""Auto-stop policies, evaluated by the supervisor every few seconds (standard library only).

``autostop:`` in the job file::

    autostop:
      max_runtime: 8h                 # wall time since the job started
      budget: 40                      # cost (price_per_hour x hours) in the host's currency
      gpu_idle: {below: 5, for: 30m}  # every GPU under 5% for 30m AND no step progress
      stall: 20m                      # no new log byte and no new metric for 20m
      nan_loss: true                  # the last metric's loss is nan/inf
      plateau: {metric: eval_loss, mode: min, patience: 5, min_delta: 0.001}
      disk_free_below: 5GB            # free space of the job's disk
      after: shutdown                 # none (default) | shutdown: power off once the job ended
      pull_before_shutdown: 30m       # true (= 30m) or a duration: wait for `gpujob pull` first
      check_every: 5s

A policy that fires makes the supervisor stop the job gracefully (stop file, grace,
checkpoint) with a reason starting ``autostop:``; the final state is ``autostopped``.
"""

import math
import os
import time
from typing import Any, Dict, List, Optional

from remote.core.protocol import parse_duration, parse_size
from remote.core.sections import (
    AUTOSTOP_KEYS,
    GPU_IDLE_BELOW,
    GPU_IDLE_FOR,
    PLATEAU_MIN_DELTA,
    PLATEAU_MODE,
    PLATEAU_PATIENCE,
    GpuIdle,
    Plateau,
)
from remote.core.spec import JobSpec
from remote.run.observed import Progress, active_metrics, nvidia_smi_sample, read_gpu_samples, utils_of

KEYS = AUTOSTOP_KEYS
BUDGET_STOP = "autostop: budget"  # a budget stop waits for the job's next checkpoint (remote/run/supervisor.py)
# Bounds of the policies' numbers (docs/autostop.md): far above any real value, refusing nan/inf.
MAX_DURATION = 365 * 86400.0


def validate(cfg: Any) -> List[str]:
    """Problems in an ``autostop:`` section (each naming its key). [] when fine."""
    if not cfg:
        return []
    if not isinstance(cfg, dict):
        return ["expected a mapping of policies"]
    errs = []  # type: List[str]
    for k in cfg:
        if k not in KEYS:
            errs.append("unknown policy {!r} (known: {})".format(k, ", ".join(KEYS)))

    def dur(key: str, v: Any) -> None:
        try:
            if not 0 < parse_duration(v) <= MAX_DURATION:
                errs.append("{}: expected more than 0s and at most 365d".format(key))
        except ValueError as e:
            errs.append("{}: {}".format(key, e))

    def num(key: str, v: Any, top: float = 1e12) -> None:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= top:
            errs.append("{}: expected a number from 0 to {:g}, got {}".format(key, top, repr(v)[:40]))

    for key in ("max_runtime", "stall", "check_every"):
        if key in cfg:
            dur(key, cfg[key])
    if "budget" in cfg:
        num("budget", cfg["budget"])
    if "nan_loss" in cfg and not isinstance(cfg["nan_loss"], bool):
        errs.append("nan_loss: expected true or false")
    if "disk_free_below" in cfg:
        try:
            parse_size(cfg["disk_free_below"])
        except ValueError as e:
            errs.append("disk_free_below: {}".format(e))
    if "after" in cfg and cfg["after"] not in ("none", "shutdown", None):
        errs.append("after: expected 'none' or 'shutdown', got {!r}".format(cfg["after"]))
    if "pull_before_shutdown" in cfg and not isinstance(cfg["pull_before_shutdown"], bool):
        dur("pull_before_shutdown", cfg["pull_before_shutdown"])
    gi = cfg.get("gpu_idle")
    if gi is not None:
        if not isinstance(gi, dict):
            errs.append("gpu_idle: expected {below: 5, for: 30m}")
        else:
            for k in gi:
                if k not in ("below", "for"):
                    errs.append("gpu_idle: unknown key {!r} (known: below, for)".format(k))
            num("gpu_idle.below", gi.get("below", GPU_IDLE_BELOW), 100)
            dur("gpu_idle.for", gi.get("for", GPU_IDLE_FOR))
    pl = cfg.get("plateau")
    if pl is not None:
        if not isinstance(pl, dict):
            errs.append("plateau: expected {metric: eval_loss, mode: min, patience: 5, min_delta: 0.001}")
        else:
            for k in pl:
                if k not in ("metric", "mode", "patience", "min_delta"):
                    errs.append("plateau: unknown key {!r} (known: metric, mode, patience, min_delta)".format(k))
            if not isinstance(pl.get("metric"), str) or not pl.get("metric"):
                errs.append("plateau.metric: name the metric to watch, e.g. eval_loss")
            if pl.get("mode", PLATEAU_MODE) not in ("min", "max"):
                errs.append("plateau.mode: expected 'min' or 'max'")
            p = pl.get("patience", PLATEAU_PATIENCE)
            if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 1000000:
                errs.append("plateau.patience: expected a whole number of evaluations from 1 to 1000000")
            num("plateau.min_delta", pl.get("min_delta", PLATEAU_MIN_DELTA))
    return errs


def _bad(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("nan", "inf", "-inf", "+inf", "infinity", "-infinity")
    return isinstance(v, float) and (math.isnan(v) or math.isinf(v))


def loss_is_bad(metrics: Optional[Dict[str, Any]]) -> Optional[str]:
    """The name of a loss in ``metrics`` that is nan/inf, else None."""
    for k, v in (metrics or {}).items():
        if (k == "loss" or k.endswith("loss")) and _bad(v):
            return k
    return None


class AutoStop:
    """A supervisor watcher: ``tick(now)`` returns ``"autostop: ..."`` when a policy fires.

    ``ctx`` (remote/run/watchers.py's JobContext) gives the job, its status and its spec as it is now."""

    name = "auto-stop"

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.cfg = JobSpec.of(ctx.spec).autostop
        self.job_path = job_path = str(ctx.job.path)
        every = self.cfg.check_every
        self.every = every if every is not None else parse_duration(os.environ.get("GPUJOB_AUTOSTOP_EVERY", "5"))
        self.started = time.time()
        self.files = Progress(os.path.join(job_path, "output.log"), os.path.join(job_path, "metrics.jsonl"),
                            resolve=lambda: active_metrics(job_path))
        self.next_check = self.started + self.every
        self.own_samples = []  # type: List[Dict[str, Any]]
        self.fired = None  # type: Optional[str]

    @property
    def interval(self) -> float:
        return self.every

    @property
    def spec(self) -> JobSpec:
        return JobSpec.of(self.ctx.spec)

    @property
    def active(self) -> bool:
        return self.cfg.active

    def runtime(self) -> float:
        return time.time() - float(self.ctx.status.started_at or self.started)

    def tick(self, monotonic: float = 0.0) -> Optional[str]:
        now = time.time()  # the policies count in wall time (the status's times)
        if self.fired or now < self.next_check or not self.active:
            return None
        attempts = self.ctx.status.attempts or [{}]
        if now - float(attempts[-1].get("started_at") or 0) < self.every:
            return None  # give a fresh attempt time to start (and to install its stop handling)
        self.next_check = now + self.every
        self.files.poll(now)
        try:
            reason = self.check(now)
        except Exception as e:  # a policy bug must never take the job down
            reason = None
            try:
                self.ctx.job.event("autostop_error", error=str(e))
            except Exception:
                pass
        if reason:
            self.fired = reason
        return reason

    def check(self, now: float) -> Optional[str]:
        c, said = self.cfg, self.cfg.said  # said: the values as written, which the reasons quote
        rt = self.runtime()
        if c.max_runtime is not None and rt >= c.max_runtime:
            return "autostop: max_runtime {} reached".format(said["max_runtime"])
        price = self.spec.price_per_hour
        if c.budget is not None and price:
            cost = rt / 3600.0 * float(price)
            if cost >= c.budget:
                return BUDGET_STOP + " {} {} reached (cost {:.2f})".format(
                    said["budget"], self.spec.currency or "", cost)
        if c.nan_loss and self.files.records:
            bad = loss_is_bad(self.files.records[-1])
            if bad:
                return "autostop: nan_loss ({} is {})".format(bad, self.files.records[-1].get(bad))
        if c.stall is not None:
            last = max(self.files.log_changed, self.files.metrics_changed)
            if now - last >= c.stall:
                return "autostop: stall (no new log line or metric for {})".format(said["stall"])
        if c.plateau:
            r = self.plateau(c.plateau)
            if r:
                return r
        if c.disk_free_below is not None:
            from remote.ckpt.diskbudget import given_back_on_demand

            st = os.statvfs(self.job_path)
            free = st.f_bavail * st.f_frsize + given_back_on_demand(self.job_path)  # the kept copy makes way
            if free < c.disk_free_below:
                return "autostop: disk_free_below {} ({:.1f} GB free)".format(said["disk_free_below"], free / 2 ** 30)
        if c.gpu_idle:
            r = self.gpu_idle(c.gpu_idle, now)
            if r:
                return r
        return None

    def plateau(self, pl: Plateau) -> Optional[str]:
        name, mode, patience, delta = pl.metric, pl.mode, pl.patience, pl.min_delta
        vals = [r[name] for r in self.files.records if isinstance(r.get(name), (int, float)) and not _bad(r.get(name))]
        best, since = None, 0
        for v in vals:
            better = best is None or (v < best - delta if mode == "min" else v > best + delta)
            if better:
                best, since = v, 0
            else:
                since += 1
        if best is not None and since >= patience:
            return "autostop: plateau ({} has not improved on {:.6g} for {} evaluations)".format(name, best, since)
        return None

    def gpu_samples(self, since: float, now: float) -> List[Dict[str, Any]]:
        """gpu.jsonl's samples (the GPU sampler's), else samples of our own from nvidia-smi."""
        samples = read_gpu_samples(os.path.join(self.job_path, "gpu.jsonl"), since)
        if samples and now - float(samples[-1].get("t") or 0) <= max(3 * self.every, 60):
            return samples
        s = nvidia_smi_sample(self.spec.path_prefix)
        if s:
            self.own_samples.append(s)
        self.own_samples = [x for x in self.own_samples if x["t"] >= since]
        return self.own_samples

    def gpu_idle(self, gi: GpuIdle, now: float) -> Optional[str]:
        below, window = gi.below, gi.window
        if now - self.runtime_start() < window:
            return None
        samples = self.gpu_samples(now - window, now)
        if not samples or float(samples[0].get("t") or now) > now - window + max(2 * self.every, window * 0.1):
            return None  # the samples do not cover the window yet
        utils = [u for s in samples for u in utils_of(s)]
        if not utils or max(utils) >= below:
            return None
        if now - self.files.step_changed < window:
            return None  # steps still advance: utilisation alone lies (data loading, CPU-bound eval)
        return "autostop: gpu_idle (GPU utilisation under {}% for {} with no step progress)".format(*gi.said)

    def runtime_start(self) -> float:
        return self.started


def watcher(ctx: Any) -> Optional[AutoStop]:
    """The watcher for a supervisor's job (``ctx``: its JobContext), or None when its spec has no policy."""
    w = AutoStop(ctx)
    return w if w.active else None

