"""Runs of the ledger as MLflow runs, with MLflow's own client (``mlflow-skinny``'s ``MlflowClient``).

One MLflow run per job, found again by its ``gpujob.job_id`` tag (so a second laptop exporting the
same job adds nothing): the ledger's parameters, tags (host, GPU, code hash, git commit and dirty
flag, sweep and trial, parent of a rerun, gpujob version, mirrored checkpoints), each metric's
points by step (those ``status`` reads: loss, eval, throughput, GPU use, cost), the state and end
time. A metric's points are sent once: only those past the last step sent (``exportstate``); a
diverged loss's nan and ±inf too, as MLflow keeps them (its SQL store: ±inf as ±the largest float).
An ended run's whole curve (every step its host logged, read once by the look that saw it end)
fills, once, the steps the run lacks below the last one sent (a live follow sends what each look read).

What the server refuses of one run is said once and passed by: the other runs go. A run someone
deleted on the server stays deleted (nothing more sent to it, no new one made) until it is restored
there. A URI holding a password is refused whichever path met it (nothing sent, nothing stored)."""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any, Callable, TypedDict

from gpujob.config.ledger import open_ledger
from gpujob.config.ledger.store import LedgerRow
from gpujob.config.secreturl import credential_in, shown
from gpujob.errors import ConnectError, GpujobError
from gpujob.usecases.lab.exportstate import ExportState, Sent
from gpujob.usecases.lab.target import Target, of_row

STATUS = {"succeeded": "FINISHED", "failed": "FAILED", "lost": "FAILED", "stopped": "KILLED",
          "autostopped": "KILLED", "moved": "KILLED"}
NOT_METRICS = {"step", "epoch", "t", "max_steps", "total_flos"}
PARAM_MAX, TAG_MAX = 6000, 5000  # MLflow's limits on a value's length
BATCH = 900  # points per log_batch (the server takes 1000 entities a call)
_KEY_BAD = re.compile(r"[^A-Za-z0-9_\-. /]")
DELETED = "deleted"  # a run's lifecycle stage in MLflow, and its status in ``exportstate``: left so
PASSWORD = "its URI holds a password"  # the server's error: nothing is sent with such a URI
PASSWORD_NEXT = ("nothing is sent with it: give the URI without the password, and the password in "
                 "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)")


def client_for(uri: str) -> Any:
    """MLflow's client for ``uri``, failing fast: a server that is down is said at once, not after minutes
    of MLflow's own retries."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # stdout is the --json document
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise GpujobError("exporting runs to MLflow needs MLflow's client, which is not installed here",
                          "pip install 'gpujob[mlflow]' (from a checkout: pip install -e '.[mlflow]')") from None
    return MlflowClient(tracking_uri=uri)


def _key(k: str) -> str:
    return _KEY_BAD.sub("_", str(k))[:250] or "_"


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _value(v: Any) -> float | None:
    """A metric's value: any number, nan and ±inf kept (a divergence is what the lab must see)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    try:
        return float(v)
    except OverflowError:  # an integer past a float's range
        return math.inf if v > 0 else -math.inf


def _as_kept(v: float) -> float:
    """``v`` as MLflow's SQL store keeps it: ±inf as ±the largest float."""
    return math.copysign(sys.float_info.max, v) if math.isinf(v) else v


def _same(a: Any, b: Any) -> bool:
    """The same value, nan equal to nan and inf to what the server keeps for it."""
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    a, b = _as_kept(float(a)), _as_kept(float(b))
    return a == b or (math.isnan(a) and math.isnan(b))


def _ms(t: Any) -> int:
    return int(float(t) * 1000) if _num(t) is not None else int(time.time() * 1000)


def tags_of(row: LedgerRow) -> dict[str, str]:
    from gpujob.version import __version__

    extra = e if isinstance(e := row.get("extra"), dict) else {}
    t = {"gpujob.job_id": row["job_id"], "mlflow.runName": row["job_id"], "gpujob.name": row.get("name"),
         "gpujob.host": row.get("host"), "gpujob.gpu": row.get("gpu"), "gpujob.gpus": row.get("gpus"),
         "gpujob.code_hash": row.get("code_hash"), "mlflow.source.git.commit": row.get("git_commit"),
         "gpujob.git_dirty": None if row.get("git_commit") is None else str(bool(row.get("diff_hash"))).lower(),
         "gpujob.env_hash": row.get("env_hash"), "gpujob.sweep": row.get("sweep"), "gpujob.trial": row.get("trial"),
         "gpujob.parent": row.get("parent"), "gpujob.state": row.get("state"), "gpujob.version": __version__,
         "gpujob.run_line": row.get("run_line")}
    from gpujob.bundle import import_remote

    dest = import_remote("mirror.engine").dest
    for i, m in enumerate((extra.get("live") or {}).get("mirrored") or []):
        step = f" (step {m['step']})" if m.get("step") is not None else ""
        t[f"gpujob.checkpoint.{i}"] = f"{m['target'].rstrip('/')}/{row['job_id']}/{m['name']}{step}"
    mirror = (row.get("spec") or {}).get("checkpoint_mirror")
    targets = mirror.get("targets") if isinstance(mirror, dict) else None  # the spec as sent: a list or none
    for i, target in enumerate(targets if isinstance(targets, list) else []):
        if isinstance(target, str):
            t[f"gpujob.mirror.{i}"] = dest(target, row["job_id"]) if not target.startswith("s3://") \
                else f"{target.rstrip('/')}/{row['job_id']}"
    return {k: str(v)[:TAG_MAX] for k, v in t.items() if v is not None}


def params_of(row: LedgerRow) -> dict[str, str]:
    out = {}
    for k, v in (row.get("params") or {}).items():
        out[_key(k)] = (v if isinstance(v, str) else json.dumps(v, default=str))[:PARAM_MAX]
    return out


def points_of(row: LedgerRow) -> dict[str, list[tuple[int, float, int]]]:
    """key -> [(step, value, ms)], oldest first: the curves, then the run-wide figures at the newest step."""
    out: dict[str, list[tuple[int, float, int]]] = {}
    last_step, last_t = 0, row.get("updated_at")
    for k, pts in (row.get("series") or {}).items():
        if k in NOT_METRICS or not isinstance(pts, list):
            continue
        for i, p in enumerate(pts):
            value = _value(p[1]) if isinstance(p, list) and len(p) >= 2 else None
            if value is None:
                continue
            step = int(p[0]) if isinstance(p[0], (int, float)) and _num(p[0]) is not None else i
            out.setdefault(_key(k), []).append((step, value, _ms(p[2] if len(p) > 2 else None)))
            last_step = max(last_step, step)
    final = row.get("final") or {}
    if isinstance(at := final.get("step"), (int, float)) and _num(at) is not None:
        last_step = max(last_step, int(at))
    for k, v in final.items():  # an eval figure printed once has no curve: its newest value, at its step
        if k not in NOT_METRICS and _key(k) not in out and (value := _value(v)) is not None:
            out[_key(k)] = [(last_step, value, _ms(last_t))]
    live = ((row.get("extra") or {}).get("live") or {}) if isinstance(row.get("extra"), dict) else {}
    for k, v in (("gpujob/cost", row.get("cost")), ("gpujob/gpu_hours", row.get("gpu_hours")),
                 ("gpujob/steps_per_s", live.get("steps_per_s")), ("gpujob/gpu_util", live.get("gpu_util"))):
        if (x := _num(v)) is not None:
            out[k] = [(last_step, x, _ms(last_t))]
    return out


def _new_points(points: dict[str, list[tuple[int, float, int]]], last: dict[str, list[float]]) -> list[tuple[str, int, float, int]]:
    """The points past what was sent: a later step, or at the last step a changed value (cost grows)."""
    fresh = []
    for k, pts in points.items():
        seen = last.get(k)
        for i, (step, value, ms) in enumerate(pts):
            if seen is None or step > seen[0] or (step == seen[0] and not _same(value, seen[1]) and i == len(pts) - 1):
                fresh.append((k, step, value, ms))
                seen = [step, value]
        if seen is not None:
            last[k] = seen
    return fresh


class Refusal(TypedDict, total=False):
    """A run a server refused, or left deleted (``export``'s ``refused``; ``refusal_line`` says it)."""

    uri: str  # as shown: no password
    job_id: str
    run_id: str | None
    why: str  # the server's words, or DELETED
    new: bool  # not said before
    experiment: str  # the job's experiment was deleted (no run)


class ExportDoc(TypedDict):
    """``export``: {exported, unchanged, points, left, refused, pending, servers: {uri as shown: error|None}}."""

    exported: int
    unchanged: int
    points: int
    servers: dict[str, str | None]
    pending: int
    left: int
    refused: list[Refusal]


class Exporter:
    """One server: experiments by name, runs by job id; what it refused of single runs (``refused``)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.client = client_for(uri)
        self.experiments: dict[str, str] = {}
        self.gone: set[str] = set()  # experiments deleted on the server: their jobs are left out, as a deleted run
        self.refused: list[Refusal] = []
        self.left = 0  # runs left deleted

    def experiment(self, name: str) -> str:
        if name not in self.experiments:
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                try:
                    self.experiments[name] = self.client.create_experiment(name)
                except Exception:  # another laptop made it meanwhile
                    exp = self.client.get_experiment_by_name(name)
                    if exp is None:
                        raise
            if exp is not None:
                self.experiments[name] = exp.experiment_id
                if exp.lifecycle_stage == DELETED:
                    self.gone.add(exp.experiment_id)
        return self.experiments[name]

    def find(self, exp_id: str, job_id: str) -> Any:
        """The job's run, a deleted one too (it stays deleted, not made again); an active one first."""
        from mlflow.entities import ViewType

        found = self.client.search_runs([exp_id], filter_string=f"tags.`gpujob.job_id` = '{job_id}'",
                                        run_view_type=ViewType.ALL, max_results=10)
        return min(found, key=lambda r: r.info.lifecycle_stage == DELETED, default=None)

    def run(self, run_id: str) -> Any:
        """The run as the server holds it; None: the server has no such run (any other answer is raised)."""
        from mlflow.exceptions import RestException

        try:
            return self.client.get_run(run_id)
        except RestException as e:
            if e.error_code == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise

    def sent_before(self, run: Any) -> tuple[dict[str, list[float]], list[str]]:
        """What an MLflow run already holds (made by another laptop, or before this state file)."""
        last: dict[str, list[float]] = {}
        for k in run.data.metrics:
            hist = self.client.get_metric_history(run.info.run_id, k)
            if hist:
                top = max(hist, key=lambda m: (m.step, m.timestamp))
                last[k] = [top.step, top.value]
        return last, list(run.data.params)

    def _leave(self, row: LedgerRow, run_id: str, state: ExportState, known: bool, experiment: str = "") -> int:
        """A run someone deleted on the server (``experiment``: the job's whole experiment, ``run_id`` ''):
        nothing more sent to it, no new one made; said once."""
        state.put(row["job_id"], self.uri, run_id, row.get("updated_at") or 0.0, {}, [], DELETED)
        self.left += 1
        if not known:
            self.refused.append({"uri": shown(self.uri), "job_id": row["job_id"], "run_id": run_id, "why": DELETED,
                                 "new": True, **({"experiment": experiment} if experiment else {})})
        return 0

    def export_or_note(self, row: LedgerRow, target: Target, state: ExportState, whole: str | None = None) -> int:
        """``export``; the server's refusal of this one run noted (``refused``), not raised: the others go."""
        try:
            points = self.export(row, target, state, whole)
        except Exception as e:
            why = _refusal(e)
            if why is None:
                raise
            mine = state.get(row["job_id"], self.uri)
            self.refused.append({"uri": shown(self.uri), "job_id": row["job_id"], "why": why,
                                 "run_id": mine["run_id"] if mine else None,
                                 "new": state.refused_anew(row["job_id"], self.uri, why)})
            return 0
        state.taken(row["job_id"], self.uri)
        return points

    def export(self, row: LedgerRow, target: Target, state: ExportState, whole: str | None = None) -> int:
        """Bring the run of ``row`` up to date; how many points were sent. ``whole``: the end whose
        whole curve ``row``'s series is (the steps the run lacks are filled once)."""
        mine: Sent | None = state.get(row["job_id"], self.uri)
        if mine is not None and mine["status"] == DELETED:
            run = self.run(mine["run_id"]) if mine["run_id"] else None
            if run is not None and run.info.lifecycle_stage != DELETED:
                last, params = self.sent_before(run)  # restored on the server: it follows again, from what it holds
                mine = {"run_id": run.info.run_id, "last": last, "params": params, "status": run.info.status}
            elif mine["run_id"] or self.experiment(target.experiment) in self.gone:
                return self._leave(row, mine["run_id"], state, known=True)
            else:
                mine = None  # its experiment restored: the run is made now
        known = mine is not None
        if mine is None:
            exp_id = self.experiment(target.experiment)
            if exp_id in self.gone:
                return self._leave(row, "", state, known=False, experiment=target.experiment)
            run = self.find(exp_id, row["job_id"])
            if run is None:
                run = self.client.create_run(exp_id, start_time=_ms(row.get("started_at") or row.get("submitted_at")),
                                             tags={"gpujob.job_id": row["job_id"]}, run_name=row["job_id"])
                mine = {"run_id": run.info.run_id, "last": {}, "params": [], "status": None}
            elif run.info.lifecycle_stage == DELETED:
                return self._leave(row, run.info.run_id, state, known=False)
            else:
                last, params = self.sent_before(run)
                mine = {"run_id": run.info.run_id, "last": last, "params": params, "status": run.info.status}
        try:
            return self._send(row, mine, state, whole)
        except Exception as e:
            if _refusal(e) is None:
                raise
            run = self.run(mine["run_id"])
            if run is not None and run.info.lifecycle_stage == DELETED:
                return self._leave(row, mine["run_id"], state, known=False)
            if run is None and known:  # the server no longer has it at all (a new database): made again
                state.forget(row["job_id"], self.uri)
                return self.export(row, target, state, whole)
            raise

    def _gaps(self, run_id: str, points: dict[str, list[tuple[int, float, int]]], sent: set[str],
              fresh: list[tuple[str, int, float, int]]) -> list[tuple[str, int, float, int]]:
        """The whole curve's points at steps the run lacks, of the metrics sent before (the others go whole)."""
        going = {(k, step) for k, step, _, _ in fresh}
        out = []
        for k in sorted(sent & set(points)):
            if k.startswith("gpujob/"):  # run-wide figures: their newest value alone
                continue
            have = {m.step for m in self.client.get_metric_history(run_id, k)}
            out += [(k, step, v, ms) for step, v, ms in points[k] if step not in have and (k, step) not in going]
        return out

    def _send(self, row: LedgerRow, mine: Sent, state: ExportState, whole: str | None = None) -> int:
        from mlflow.entities import Metric, Param, RunTag

        run_id = mine["run_id"]
        params = {k: v for k, v in params_of(row).items() if k not in set(mine["params"])}
        tags = tags_of(row)
        points, sent = points_of(row), set(mine["last"])
        fresh = _new_points(points, mine["last"])
        if whole is not None and state.whole_sent(row["job_id"], self.uri) != whole:
            fresh += self._gaps(run_id, points, sent, fresh)
        metrics = [Metric(k, v, ms, step) for k, step, v, ms in fresh]
        ps = [Param(k, v) for k, v in params.items()]
        ts = [RunTag(k, v) for k, v in tags.items()]
        while True:  # the server takes at most 100 params, 100 tags and 1000 entities a call
            bp, ps = ps[:100], ps[100:]
            bt, ts = ts[:100], ts[100:]
            room = BATCH - len(bp) - len(bt)
            bm, metrics = metrics[:room], metrics[room:]
            self.client.log_batch(run_id, metrics=bm, params=bp, tags=bt)
            if not (ps or ts or metrics):
                break
        status = STATUS.get(row.get("state") or "", "RUNNING")
        if status != "RUNNING":
            self.client.set_terminated(run_id, status=status, end_time=_ms(row.get("ended_at") or row.get("updated_at")))
        elif mine.get("status") != "RUNNING":
            self.client.update_run(run_id, status="RUNNING")
        state.put(row["job_id"], self.uri, run_id, row.get("updated_at") or 0.0, mine["last"],
                  list(mine["params"]) + list(params_of(row)), status)
        if whole is not None:
            state.put_whole(row["job_id"], self.uri, whole)
        return len(fresh)


def _refusal(e: BaseException) -> str | None:
    """The refusal of one run, in the server's or MLflow's client's words (a value it cannot hold, such
    as a step past 64 bits); None: the server as a whole did not take the runs (it did not answer, or
    refused the credentials: every run would fail alike)."""
    from mlflow.exceptions import RestException

    if isinstance(e, RestException) and 400 <= e.get_http_status_code() < 500 \
            and e.get_http_status_code() not in (401, 403, 429):
        return " ".join(str(e).split())[:300]
    if isinstance(e, (ValueError, TypeError, OverflowError)) and not isinstance(e, (GpujobError, OSError)):
        return f"MLflow's client cannot send it: {' '.join(str(e).split())[:200]}"
    return None


def export(uri: str | None = None, job_ids: Iterable[str] | None = None,
           progress: Callable[[int, int], None] | None = None, recheck: bool = False) -> ExportDoc:
    """Send every ledger row changed since its last export (``uri``: to that server, every run;
    else each row to its own target; ``recheck``: a run left deleted is looked at again, restored or not).
    {exported, unchanged, points, left, refused: [{uri, job_id, run_id, why, new}], pending,
    servers: {uri as shown: error|None}}."""
    with open_ledger() as lg:
        heads = lg.db.execute("SELECT job_id, updated_at, extra, name FROM runs ORDER BY submitted_at").fetchall()
        state = ExportState()
        try:
            todo: dict[str, list[tuple[str, Target]]] = {}
            versions: dict[str, dict[str, float]] = {}
            deleted: dict[str, set[str]] = {}
            wanted = set(job_ids) if job_ids is not None else None
            unchanged = 0
            for job_id, updated_at, extra, name in heads:
                if wanted is not None and job_id not in wanted:
                    continue
                target = of_row({"extra": json.loads(extra) if extra else {}, "name": name}, uri)
                if target is None:
                    continue
                seen = versions.setdefault(target.uri, state.versions(target.uri))
                again = recheck and job_id in deleted.setdefault(target.uri, state.deleted(target.uri))
                if seen.get(job_id, -1.0) >= (updated_at or 0.0) and not again:
                    unchanged += 1
                    continue
                todo.setdefault(target.uri, []).append((job_id, target))
            total = sum(len(v) for v in todo.values())
            done = points = left = 0
            refused: list[Refusal] = []
            servers: dict[str, str | None] = {}
            for where, jobs in todo.items():
                if credential_in(where):  # MLFLOW_TRACKING_URI read by the detached exporter: neither used nor kept
                    servers[shown(where)] = PASSWORD
                    continue
                ex = None
                try:
                    ex = Exporter(where)
                    for job_id, target in jobs:
                        row = lg.get(job_id)
                        kept = lg.curve(job_id) if row is not None and row.get("state") in STATUS else None
                        if row is not None and kept is not None:
                            row["series"] = kept[1]  # every point the host logged, read when the job was seen ended
                        if row is not None:
                            points += ex.export_or_note(row, target, state, kept[0] if kept else None)
                        done += 1
                        if progress:
                            progress(done, total)
                    servers[shown(where)] = None
                except GpujobError:
                    raise
                except Exception as e:  # MLflow's client raises its own and requests' errors: the server's word
                    servers[shown(where)] = _why(e)
                finally:
                    if ex is not None:
                        left += ex.left
                        refused += ex.refused
            failed = sum(r["why"] != DELETED for r in refused)
            return {"exported": done - left - failed,
                    "unchanged": unchanged, "points": points, "servers": servers, "pending": total - done,
                    "left": left, "refused": refused}
        finally:
            state.close()


_CAUSES = ("Connection refused", "timed out", "Name or service not known", "No route to host",
           "Temporary failure in name resolution", "Connection reset", "401", "403", "Unauthorized", "Forbidden")


def _why(e: BaseException) -> str:
    """The cause in a few words (MLflow's client nests requests' and urllib3's whole story in its text)."""
    text = " ".join(str(e).split())
    for cause in _CAUSES:
        if cause in text:
            return {"401": "refused the credentials (401)", "403": "refused the credentials (403)"}.get(cause, cause.lower())
    return text[:200] or type(e).__name__


def export_or_raise(uri: str | None, progress: Callable[[int, int], None] | None = None) -> ExportDoc:
    """``gpujob runs export --mlflow``: a server that did not take the runs, or refused one (other than
    a run deleted there, which is left so), is a connection error (exit 3) once every other run went."""
    doc = export(uri, progress=progress, recheck=True)
    bad = {u: e for u, e in doc["servers"].items() if e}
    if bad:
        u, e = next(iter(bad.items()))
        raise ConnectError(f"MLflow at {shown(u)} did not take the runs ({e}); {doc['exported']} of "
                           f"{doc['exported'] + doc['pending']} exported",
                           "check the server (mlflow server) and run gpujob runs export --mlflow again: "
                           "what was sent is not sent twice")
    failed = [r for r in doc["refused"] if r["why"] != DELETED]
    if failed:
        raise ConnectError("; ".join(refusal_line(r) for r in failed) + f"; the other {doc['exported']} run(s) went",
                           "a refused run is tried again at each export; delete its MLflow run to leave "
                           "it out (a deleted run is not made again)")
    return doc


def refusal_line(r: Mapping[str, object]) -> str:
    """A run the server refused, said as what it is (``r``: one of ``export``'s ``refused``)."""
    if r.get("why") == "deleted" and r.get("experiment"):
        return (f"MLflow at {r.get('uri')}: the experiment {r.get('experiment')} of {r.get('job_id')} was deleted "
                "there; gpujob leaves the job out (restored in MLflow, it follows again)")
    if r.get("why") == "deleted":
        return (f"MLflow at {r.get('uri')}: the run of {r.get('job_id')} ({r.get('run_id')}) was deleted there; "
                "gpujob leaves it deleted and sends it nothing more (restored in MLflow, it follows again)")
    return f"MLflow at {r.get('uri')} refused the run of {r.get('job_id')} ({r.get('why')})"
