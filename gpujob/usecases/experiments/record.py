"""What the ledger learns: at submit (spec, run line and its arguments, code, environment) and each
time the laptop reads a job's state (``status``, ``ls``, ``wait``): state, times, metrics, cost.

The look that first sees a job ended (whichever command, the dashboard, a sweep's poll) reads the
job's final metrics and every point of its curves from the host once (``observe``'s ``whole``): the
row's last and best values are the run's own, and the whole curve is kept for the lab's export.

A ledger that cannot be written never fails the command that reads or submits: the row waits
for the next look at the job.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from gpujob.config.ledger import Ledger, LedgerDamaged, open_ledger
from gpujob.config.ledger.store import LedgerRow, LiveFigures, Mirrored, read_looks
from gpujob.errors import GpujobError
from gpujob.jsontypes import JSONObject
from gpujob.usecases.experiments.direction import better, declared_of

if TYPE_CHECKING:  # ls and status import this module: the spec's YAML and the tree walk only where used
    from gpujob.config.ledger.code import Snapshot
    from gpujob.config.spec import JobSpec
    from gpujob.transport.jobview import JobView  # runs imports this module and no transport

SERIES_POINTS = 200  # a curve kept in the ledger: at most this many points per metric
NOT_METRICS = {"step", "epoch", "t", "lr", "learning_rate", "grad_norm", "max_steps", "total_flos"}
FINAL_STATES = ("succeeded", "failed", "stopped", "autostopped", "lost", "moved")
WholeStatus = Callable[[str], JSONObject]  # job id -> its status document with every point its host logged
WHOLE_PER_LOOK = 8  # ended jobs whose whole curve one look reads (a first ``ls --all`` of many: the next looks go on)


def _warn(e: BaseException) -> None:
    if isinstance(e, LedgerDamaged):  # names the file, where it was kept and what to do
        print(f"gpujob: the run ledger was not updated: {e.cause}\n  → {e.remedy}", file=sys.stderr)
        return
    print(f"gpujob: the run ledger was not updated ({type(e).__name__}: {e})", file=sys.stderr)


def env_hash(spec: JobSpec) -> str:
    """The job's environment as the laptop knows it: setup, python, requirements' content, env vars."""
    req = Path(spec.requirements).read_bytes() if spec.requirements and Path(spec.requirements).is_file() else b""
    doc = f"{spec.setup or ''}\0{spec.python or ''}\0{hashlib.sha256(req).hexdigest()}\0{sorted(spec.env.items())}"
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


class CodeState(TypedDict, total=False):
    """The code about to be sent (``code_of``): its row's columns, the diff and the snapshot being kept."""

    git_commit: str | None
    diff_hash: str | None
    diff: str
    code_hash: str
    snapshot: Snapshot | bool


class Observed(LedgerRow, total=False):
    """``fields_of``: a row's columns learnt from a status document, and what joins its params and extra."""

    extra_hparams: JSONObject
    extra_live: LiveFigures


def code_of(spec: JobSpec) -> CodeState:
    """The code about to be sent: git commit, diff hash (and the diff), tree hash; its snapshot kept."""
    from gpujob.config.ledger.code import DIFF_MAX, code_hash, git_state, start_snapshot, tree_files
    from gpujob.usecases.secrets.job import keep_secret_job_file_home

    keep_secret_job_file_home(spec)  # a job file with literal secrets is neither sent nor kept
    wd = Path(spec.workdir)
    try:
        commit, diff_hash, diff = git_state(wd, [e.lstrip("/") for e in spec.exclude if e.startswith("/")])
        if len(diff) > DIFF_MAX:
            diff = ""  # its hash still tells the runs apart; the snapshot (if small enough) keeps the code
        files = tree_files(wd, spec.exclude)
        digest = code_hash(wd, files)
        # a commit and its diff rebuild the code: a tarball is kept only where they cannot (written
        # while the submit syncs; record_submit waits for it)
        kept = start_snapshot(wd, files, digest) if not (commit and (diff or not diff_hash)) else False
    except OSError as e:  # a file that went away meanwhile: the submit goes on, the row has no code
        _warn(e)
        return {}
    return {"git_commit": commit, "diff_hash": diff_hash, "diff": diff, "code_hash": digest, "snapshot": kept}


def record_submit(res: Mapping[str, object], spec: JobSpec, code: CodeState | None, job_file: str | None,
                  overrides: list[str], **link: Any) -> None:
    """The new run's row. ``link``: parent, sweep, trial."""
    from gpujob.config.ledger.params import run_args

    try:
        code = code.copy() if code else CodeState()
        snap = code.pop("snapshot", False)
        kept = snap if isinstance(snap, bool) else snap.kept()
        with open_ledger() as lg:
            diff = code.pop("diff", "")
            if diff and (digest := code.get("diff_hash")):
                lg.keep_diff(digest, diff)
            remote = spec.to_remote()
            remote.pop("host_env", None)
            lg.put(str(res["job_id"]), name=spec.name, host=res.get("host"), state=res.get("state"),
                   submitted_at=time.time(), run_line=spec.run, params=run_args(spec.run), spec=remote,
                   job_file=job_file, overrides=overrides, env_hash=env_hash(spec),
                   gpus=spec.gpus if isinstance(spec.gpus, int) else None,
                   extra={"snapshot": kept, "workdir": spec.workdir,
                          **({"mlflow": spec.mlflow} if spec.mlflow else {}),
                          **({"directions": d} if (d := declared_of(spec.metrics, spec.sweep)) else {})},
                   **code, **link)
    except (sqlite3.Error, OSError, LedgerDamaged) as e:
        _warn(e)
        return
    from gpujob.usecases.lab.follow import after_write

    after_write(bool(spec.mlflow))


def _downsample(points: list[list[Any]]) -> list[list[Any]]:
    """At most SERIES_POINTS of ``[step, value, wall time]`` (the time: the dashboard's time axes)."""
    if len(points) <= SERIES_POINTS:
        return [p[:3] for p in points]
    step = len(points) / SERIES_POINTS
    picked = [points[int(i * step)] for i in range(SERIES_POINTS - 1)] + [points[-1]]
    return [p[:3] for p in picked]


def _number(v: object) -> float | None:
    """A metric's value that can be a best: a finite number (a diverged loss's nan is no best)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    try:
        return float(v) if math.isfinite(v) else None
    except OverflowError:
        return None


def best_of(series: dict[str, list[list[Any]]], declared: Mapping[str, str] | None = None) -> dict[str, float]:
    """Each metric's best point: the lowest of a loss, the highest of an accuracy or a throughput
    (``declared``: the job file's directions, experiments/direction.py)."""
    out: dict[str, float] = {}
    for k, pts in series.items():
        if k in NOT_METRICS:
            continue
        for p in pts:
            v = _number(p[1]) if len(p) > 1 else None
            if v is not None:
                out[k] = v if k not in out else better(k, out[k], v, declared)
    return out


def _better_of(best: Mapping[str, float], values: Mapping[str, object], declared: Mapping[str, str] | None
               ) -> dict[str, float]:
    """Each metric's better of ``best`` and ``values`` (a best is never worse than the last value, nor
    than a best an earlier look saw)."""
    out = dict(best)
    for k, v in values.items():
        x = _number(v)
        if x is not None and k not in NOT_METRICS:
            out[k] = x if k not in out else better(k, out[k], x, declared)
    return out


def _view(doc: JSONObject) -> JobView:
    """The status document read by field (imported here: ``runs`` loads this module and no transport)."""
    from gpujob.transport.jobview import JobView

    return JobView(doc)


def _gpu_name(job: JobView) -> str | None:
    g = job.gpu
    if isinstance(g, dict):
        return g.get("name") or None
    if isinstance(g, list) and g and isinstance(g[0], dict):
        return g[0].get("name") or None
    return None


def fields_of(doc: JSONObject, host: str | None, declared: Mapping[str, str] | None = None) -> Observed:
    """The ledger's view of a job record from ``status`` or ``ls`` (``declared``: which way each
    metric's best goes, as the job file set it)."""
    job = _view(doc)
    f: Observed = {"state": job.state, "host": job.host or host}
    if job.name is not None:  # a field the document lacks keeps the row's value
        f["name"] = job.name
    if job.submitted_at is not None:
        f["submitted_at"] = job.submitted_at
    if job.started_at is not None:
        f["started_at"] = job.started_at
    if job.ended_at is not None:
        f["ended_at"] = job.ended_at
    if job.loss_key is not None:
        f["loss_key"] = job.loss_key
    final = job.latest_metrics or {k: v for k, v in (job.last_metrics or {}).items() if k != "t"}
    if final:
        f["final"] = final
    series = job.series
    if isinstance(series, dict) and series:
        f["series"] = {k: _downsample(v) for k, v in series.items() if isinstance(v, list)}
        f["best"] = best_of(series, declared)
    bill = job.billed
    cost = bill.cost if bill.cost is not None else job.cost
    if cost is not None:
        f["cost"] = cost
        f["currency"] = bill.currency or job.currency
    if bill.price_per_hour is not None:
        f["price_per_hour"] = bill.price_per_hour
    secs = bill.elapsed_s if bill.elapsed_s is not None else job.elapsed_s
    if secs is not None:
        gpus = (job.spec or {}).get("gpus")
        f["gpu_hours"] = round(float(secs) / 3600.0 * (gpus if isinstance(gpus, int) and gpus > 0 else 1), 6)
    if _gpu_name(job):
        f["gpu"] = _gpu_name(job)
    hparams = job.hparams
    if isinstance(hparams, dict) and hparams:
        f["extra_hparams"] = hparams
    live = _live(job)
    if live:
        f["extra_live"] = live
    return f


def _live(job: JobView) -> LiveFigures:
    """Throughput, GPU use and the mirrored checkpoints as the newest look saw them (what an export
    of the run shows beside its curves)."""
    out: LiveFigures = {}
    sps = job.steps_per_s
    if isinstance(sps, (int, float)) and not isinstance(sps, bool):
        out["steps_per_s"] = sps
    avg = (job.gpu or {}).get("avg") if isinstance(job.gpu, dict) else None
    given = [g.get("util") for g in avg if isinstance(g, dict)] if isinstance(avg, list) else []
    utils = [u for u in given if isinstance(u, (int, float)) and not isinstance(u, bool)]
    if utils:
        out["gpu_util"] = round(sum(utils) / len(utils), 2)
    targets = (job.mirror or {}).get("targets") if isinstance(job.mirror, dict) else None
    marked: list[Mirrored] = [{"target": t["target"], "name": t["mirrored"], "step": t.get("mirrored_step")}
              for t in targets or [] if isinstance(t, dict) and isinstance(t.get("target"), str)
              and isinstance(t.get("mirrored"), str)]
    if marked:
        out["mirrored"] = marked
    done = [c for c in job.checkpoints or [] if isinstance(c, dict) and c.get("complete") and isinstance(c.get("name"), str)]
    if done:  # oldest first: the last is the newest
        step, mtime = done[-1].get("step"), done[-1].get("mtime")
        out["checkpoint"] = {"name": done[-1]["name"], "step": step if isinstance(step, int) else None,
                             "mtime": float(mtime) if isinstance(mtime, (int, float)) else None}
    return out


# what this process last wrote of each job: a live view (status -w, ls --watch, the dashboard) looks
# every few seconds, and a look that learnt nothing new writes nothing (not even the file's open)
# (keyed apart for ls's light records and status's full ones, which a dashboard alternates)
_WRITTEN: dict[tuple[str, bool], str] = {}


COST_EVERY_S = 60.0  # a running job's cost alone is rewritten this often; 0: at every look (a sweep's budget)


def exact_cost() -> None:
    """Every look writes a running job's cost (a sweep counts its budget from the ledger)."""
    global COST_EVERY_S
    COST_EVERY_S = 0.0


def _fingerprint(job: JSONObject, host: str | None) -> str:
    """The job's state and metrics as far as the ledger keeps them, and its cost at most every
    ``COST_EVERY_S`` (it grows with every second a job runs)."""
    f = fields_of({k: v for k, v in job.items() if k != "series"}, host)
    live = f.pop("extra_live", None) or {}  # throughput and GPU use move at every look: written with what else changed
    view = _view(job)
    if COST_EVERY_S and f.get("state") not in FINAL_STATES:
        secs = view.billed.elapsed_s or view.elapsed_s or 0
        f["cost"] = f["gpu_hours"] = int(float(secs) // COST_EVERY_S)
    series = view.series if isinstance(view.series, dict) else {}
    seen: dict[str, object] = {**f, "series": {k: [len(v), v[-1] if v else None] for k, v in series.items()
                                               if isinstance(v, list)},
                               "checkpoint": live.get("checkpoint")}  # a new checkpoint is written, alone too
    return json.dumps(seen, sort_keys=True, default=str)


def observe(jobs: list[JSONObject], host: str | None = None, whole: WholeStatus | None = None) -> None:
    """Bring the ledger's rows of these job records up to date (a row is made for a job it lacks);
    a job whose state and metrics this process has already written is left alone. ``whole``: how to
    read a job's every point from its host, for a job seen ended whose whole curve the ledger lacks."""
    todo = []
    for j in jobs:
        v = _view(j)
        job_id = v.job_id
        if job_id:
            key = (job_id, "series" in v or "hparams" in v)
            fp = _fingerprint(j, host)
            if _WRITTEN.get(key) != fp:
                todo.append((j, key, fp))
    if todo:  # a look another process already wrote (each status is a process of its own): read, no write
        held = read_looks(sorted({key[0] for _, key, _ in todo}))
        _WRITTEN.update((key, fp) for _, key, fp in todo if held.get(key) == fp)
        todo = [t for t in todo if held.get(t[1]) != t[2]]
    if not todo:
        from gpujob.usecases.lab.follow import after_look

        after_look()
        return
    try:
        with open_ledger() as lg:
            ends = {key[0]: end for j, key, _ in todo if (end := _end_of(j)) is not None}
            kept = lg.curve_ends(list(ends)) if ends else {}
            due = [job_id for job_id, end in ends.items() if kept.get(job_id) != end] if whole is not None else []
            # read before the write's lock is taken (the host may be slow to answer); past the first
            # WHOLE_PER_LOOK, None: the next look reads them
            finals = {job_id: _whole(whole, job_id) if whole is not None and i < WHOLE_PER_LOOK else None
                      for i, job_id in enumerate(due)}
            written = []
            lg.db.execute("BEGIN IMMEDIATE")
            try:
                for j, key, fp in todo:
                    doc = finals.get(key[0])
                    _put_observed(lg, doc or j, host, whole=doc is not None,
                                  kept=key[0] in ends and kept.get(key[0]) == ends[key[0]])
                    if key[0] in finals and doc is None:
                        continue  # its end's curve could not be read: the next look tries again
                    lg.put_look(key[0], key[1], fp)
                    written.append((key, fp))
                lg.db.execute("COMMIT")
            except BaseException:
                lg.db.execute("ROLLBACK")
                raise
        _WRITTEN.update(written)
    except (sqlite3.Error, OSError, LedgerDamaged) as e:
        _warn(e)
        return
    from gpujob.usecases.lab.follow import after_write

    after_write(False)


def _end_of(job: JSONObject) -> str | None:
    """Which end of the job a record tells (its end time): None while it has not ended. A job resumed
    and ended again has a new one, and its curve is read again."""
    v = _view(job)
    return str(v.ended_at or "") if v.state in FINAL_STATES else None


def _whole(whole: WholeStatus, job_id: str) -> JSONObject | None:
    """The ended job's status with every point; None when its host did not give it (said, and tried again)."""
    try:
        doc = whole(job_id)
    except GpujobError as e:
        print(f"gpujob: the final metrics of {job_id} were not read ({e.cause}); the next look at it reads them",
              file=sys.stderr)
        return None
    return doc if _end_of(doc) is not None else None  # resumed meanwhile: the next end is read


def _put_observed(lg: Ledger, job: JSONObject, host: str | None, whole: bool = False, kept: bool = False) -> None:
    """``job``'s row; ``whole``: ``job`` holds every point of the ended job (kept whole, the row's
    curve its down-sampled copy); ``kept``: that end's curve is kept already (a later look's fewer
    points do not replace it)."""
    job_id = str(_view(job).job_id)  # observe's: never empty
    row = lg.get(job_id) or {}
    extra = row.get("extra") or {}
    declared = extra.get("directions")
    f = fields_of(job, host, declared)
    best = f.get("best") or {}
    if whole:
        series = _view(job).series
        lg.put_curve(job_id, _end_of(job) or "", series if isinstance(series, dict) else {})
    else:
        if kept:  # the end's own figures stand: a later look has no newer ones, and fewer points
            f.pop("series", None)
            f.pop("final", None)
            f.pop("loss_key", None)
            best = {}
        best = _better_of(best, row.get("best") or {}, declared)
    f["best"] = _better_of(best, f.get("final") or row.get("final") or {}, declared)
    hp = f.pop("extra_hparams", None)
    live = f.pop("extra_live", None)
    if hp is not None:  # the Trainer's own arguments (the autohook's ``hparams`` record) join the run line's
        f["params"] = {**hp, **(row.get("params") or {})}
    if live is not None:  # the row's other extras (snapshot, workdir, mlflow) stay
        known = (extra.get("live") or {}).get("checkpoint")
        if known and "checkpoint" not in live and "checkpoints" not in job:  # a look that lists none (ls)
            live["checkpoint"] = known
        f["extra"] = {**extra, "live": live}
    lg.put(job_id, **f)
