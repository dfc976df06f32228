"""Runs of the ledger as MLflow runs, with MLflow's own client (``mlflow-skinny``'s ``MlflowClient``).

One MLflow run per job, found again by its ``gpujob.job_id`` tag (so a second laptop exporting the
same job adds nothing): the ledger's parameters, tags (host, GPU, code hash, git commit and dirty
flag, sweep and trial, parent of a rerun, gpujob version, mirrored checkpoints), each metric's
points by step (those ``status`` reads: loss, eval, throughput, GPU use, cost), the state and end
time. A metric's points are sent once: only those past the last step sent (``exportstate``)."""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Iterable
from typing import Any, Callable

from gpujob.config.ledger import open_ledger
from gpujob.config.secreturl import shown
from gpujob.errors import ConnectError, GpujobError
from gpujob.usecases.lab.exportstate import ExportState
from gpujob.usecases.lab.target import Target, of_row

STATUS = {"succeeded": "FINISHED", "failed": "FAILED", "lost": "FAILED", "stopped": "KILLED",
          "autostopped": "KILLED", "moved": "KILLED"}
NOT_METRICS = {"step", "epoch", "t", "max_steps", "total_flos"}
PARAM_MAX, TAG_MAX = 6000, 5000  # MLflow's limits on a value's length
BATCH = 900  # points per log_batch (the server takes 1000 entities a call)
_KEY_BAD = re.compile(r"[^A-Za-z0-9_\-. /]")


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


def _ms(t: Any) -> int:
    return int(float(t) * 1000) if _num(t) is not None else int(time.time() * 1000)


def tags_of(row: dict[str, Any]) -> dict[str, str]:
    from gpujob.version import __version__

    extra = row.get("extra") if isinstance(row.get("extra"), dict) else {}
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
    for i, target in enumerate(((row.get("spec") or {}).get("checkpoint_mirror") or {}).get("targets") or []):
        if isinstance(target, str):
            t[f"gpujob.mirror.{i}"] = dest(target, row["job_id"]) if not target.startswith("s3://") \
                else f"{target.rstrip('/')}/{row['job_id']}"
    return {k: str(v)[:TAG_MAX] for k, v in t.items() if v is not None}


def params_of(row: dict[str, Any]) -> dict[str, str]:
    out = {}
    for k, v in (row.get("params") or {}).items():
        out[_key(k)] = (v if isinstance(v, str) else json.dumps(v, default=str))[:PARAM_MAX]
    return out


def points_of(row: dict[str, Any]) -> dict[str, list[tuple[int, float, int]]]:
    """key -> [(step, value, ms)], oldest first: the curves, then the run-wide figures at the newest step."""
    out: dict[str, list[tuple[int, float, int]]] = {}
    last_step, last_t = 0, row.get("updated_at")
    for k, pts in (row.get("series") or {}).items():
        if k in NOT_METRICS or not isinstance(pts, list):
            continue
        for i, p in enumerate(pts):
            if not isinstance(p, list) or len(p) < 2 or _num(p[1]) is None:
                continue
            step = int(p[0]) if _num(p[0]) is not None else i
            out.setdefault(_key(k), []).append((step, float(p[1]), _ms(p[2] if len(p) > 2 else None)))
            last_step = max(last_step, step)
    final = row.get("final") or {}
    if _num(final.get("step")) is not None:
        last_step = max(last_step, int(final["step"]))
    for k, v in final.items():  # an eval figure printed once has no curve: its newest value, at its step
        if k not in NOT_METRICS and _key(k) not in out and _num(v) is not None:
            out[_key(k)] = [(last_step, float(v), _ms(last_t))]
    live = ((row.get("extra") or {}).get("live") or {}) if isinstance(row.get("extra"), dict) else {}
    for k, v in (("gpujob/cost", row.get("cost")), ("gpujob/gpu_hours", row.get("gpu_hours")),
                 ("gpujob/steps_per_s", live.get("steps_per_s")), ("gpujob/gpu_util", live.get("gpu_util"))):
        if _num(v) is not None:
            out[k] = [(last_step, float(v), _ms(last_t))]
    return out


def _new_points(points: dict[str, list[tuple[int, float, int]]], last: dict[str, list[Any]]) -> list[tuple[str, int, float, int]]:
    """The points past what was sent: a later step, or at the last step a changed value (cost grows)."""
    fresh = []
    for k, pts in points.items():
        seen = last.get(k)
        for step, value, ms in pts:
            if seen is None or step > seen[0] or (step == seen[0] and value != seen[1] and pts[-1] == (step, value, ms)):
                fresh.append((k, step, value, ms))
                seen = [step, value]
        if seen is not None:
            last[k] = seen
    return fresh


class Exporter:
    """One server: experiments by name, runs by job id."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.client = client_for(uri)
        self.experiments: dict[str, str] = {}

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
        return self.experiments[name]

    def find(self, exp_id: str, job_id: str) -> Any:
        found = self.client.search_runs([exp_id], filter_string=f"tags.`gpujob.job_id` = '{job_id}'", max_results=1)
        return found[0] if found else None

    def sent_before(self, run: Any) -> tuple[dict[str, list[Any]], list[str]]:
        """What an MLflow run already holds (made by another laptop, or before this state file)."""
        last: dict[str, list[Any]] = {}
        for k in run.data.metrics:
            hist = self.client.get_metric_history(run.info.run_id, k)
            if hist:
                top = max(hist, key=lambda m: (m.step, m.timestamp))
                last[k] = [top.step, top.value]
        return last, list(run.data.params)

    def export(self, row: dict[str, Any], target: Target, state: ExportState) -> int:
        """Bring the run of ``row`` up to date; how many points were sent."""
        from mlflow.entities import Metric, Param, RunTag

        mine = state.get(row["job_id"], self.uri)
        exp_id = self.experiment(target.experiment)
        if mine is None:
            run = self.find(exp_id, row["job_id"])
            if run is None:
                run = self.client.create_run(exp_id, start_time=_ms(row.get("started_at") or row.get("submitted_at")),
                                             tags={"gpujob.job_id": row["job_id"]}, run_name=row["job_id"])
                mine = {"run_id": run.info.run_id, "last": {}, "params": [], "status": None}
            else:
                last, params = self.sent_before(run)
                mine = {"run_id": run.info.run_id, "last": last, "params": params, "status": run.info.status}
        run_id = mine["run_id"]
        params = {k: v for k, v in params_of(row).items() if k not in set(mine["params"])}
        tags = tags_of(row)
        fresh = _new_points(points_of(row), mine["last"])
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
        return len(fresh)


def export(uri: str | None = None, job_ids: Iterable[str] | None = None,
           progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Send every ledger row changed since its last export (``uri``: to that server, every run;
    else each row to its own target). {exported, unchanged, points, servers: {uri: error|None}}."""
    with open_ledger() as lg:
        heads = lg.db.execute("SELECT job_id, updated_at, extra, name FROM runs ORDER BY submitted_at").fetchall()
        state = ExportState()
        try:
            todo: dict[str, list[tuple[str, Target]]] = {}
            versions: dict[str, dict[str, float]] = {}
            wanted = set(job_ids) if job_ids is not None else None
            unchanged = 0
            for job_id, updated_at, extra, name in heads:
                if wanted is not None and job_id not in wanted:
                    continue
                target = of_row({"extra": json.loads(extra) if extra else {}, "name": name}, uri)
                if target is None:
                    continue
                seen = versions.setdefault(target.uri, state.versions(target.uri))
                if seen.get(job_id, -1.0) >= (updated_at or 0.0):
                    unchanged += 1
                    continue
                todo.setdefault(target.uri, []).append((job_id, target))
            total = sum(len(v) for v in todo.values())
            done = points = 0
            servers: dict[str, str | None] = {}
            for where, jobs in todo.items():
                try:
                    ex = Exporter(where)
                    for job_id, target in jobs:
                        row = lg.get(job_id)
                        if row is not None:
                            points += ex.export(row, target, state)
                        done += 1
                        if progress:
                            progress(done, total)
                    servers[where] = None
                except GpujobError:
                    raise
                except Exception as e:  # MLflow's client raises its own and requests' errors: the server's word
                    servers[where] = _why(e)
            return {"exported": done, "unchanged": unchanged, "points": points, "servers": servers,
                    "pending": total - done}
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


def export_or_raise(uri: str | None, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """``gpujob runs export --mlflow``: a server that did not take the runs is a connection error (exit 3)."""
    doc = export(uri, progress=progress)
    bad = {u: e for u, e in doc["servers"].items() if e}
    if bad:
        u, e = next(iter(bad.items()))
        raise ConnectError(f"MLflow at {shown(u)} did not take the runs ({e}); {doc['exported']} of "
                           f"{doc['exported'] + doc['pending']} exported",
                           "check the server (mlflow server) and run gpujob runs export --mlflow again: "
                           "what was sent is not sent twice")
    return doc
