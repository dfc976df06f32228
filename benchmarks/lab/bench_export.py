"""What the lab's MLflow export costs: a back-fill of N runs, and a ``status`` that follows into MLflow.

1. Back-fill: a fresh ledger of ``--rows`` runs (6 run-line arguments, two 200-point curves each, as
   ``benchmarks/experiments/bench_ledger.py`` fills it) sent by ``gpujob runs export --mlflow URI``,
   against the yardstick of MLflow's own client making the same runs in one process (create_run,
   one log_batch of the same params, tags and points, set_terminated): the least any exporter pays.
2. ``status JOB --json`` of a running job on ``local``, a fresh process each, alternating with
   ``MLFLOW_TRACKING_URI`` set and unset; medians of ``--runs`` (the exporter it starts lingers in the
   background and serves the following looks).

A real ``mlflow server`` (SQLite backend) on 127.0.0.1, started here.

    python benchmarks/lab/bench_export.py [--rows 1000] [--runs 9]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _env(state: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), GPUJOB_CONFIG_DIR=str(state / "config"),
                GPUJOB_STATE_DIR=str(state / "state"), GPUJOB_CACHE_DIR=str(state / "cache"),
                GPUJOB_LOCAL_ROOT=str(state / "root"), MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT="true", **extra)


def yardstick(uri: str, rows: list[dict]) -> float:
    """MLflow's client alone making the same runs."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    c = MlflowClient(uri)
    exp = c.create_experiment(f"yardstick-{time.time_ns()}")
    t = time.perf_counter()
    for r in rows:
        run = c.create_run(exp, start_time=int(r["started_at"] * 1000), run_name=r["job_id"])
        pts = [Metric(k, v, int(r["ended_at"] * 1000), int(s)) for k, curve in r["series"].items() for s, v in curve]
        c.log_batch(run.info.run_id, metrics=pts[:900], params=[Param(k, str(v)) for k, v in r["params"].items()],
                    tags=[RunTag("gpujob.job_id", r["job_id"]), RunTag("gpujob.host", r["host"])])
        if pts[900:]:
            c.log_batch(run.info.run_id, metrics=pts[900:])
        c.set_terminated(run.info.run_id, "FINISHED", int(r["ended_at"] * 1000))
    return time.perf_counter() - t


def backfill(uri: str, n: int, tmp: Path) -> dict[str, float]:
    from benchmarks.experiments.bench_ledger import fill
    from gpujob.config.ledger import open_ledger

    state = tmp / "backfill"
    os.environ.update({k: v for k, v in _env(state).items() if k.startswith("GPUJOB_")})
    fill(n)
    with open_ledger() as lg:
        rows = [lg.get(j) for j in [r[0] for r in lg.db.execute("SELECT job_id FROM runs")]]
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", "runs", "export", "--mlflow", uri, "--json"],
                       capture_output=True, text=True, env=_env(state))
    ours = time.perf_counter() - t
    if r.returncode:
        raise SystemExit(r.stderr[-800:])
    doc = json.loads(r.stdout)
    again = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpujob.cli", "runs", "export", "--mlflow", uri, "--json"],
                   capture_output=True, env=_env(state), check=True)
    again = time.perf_counter() - again
    yard = yardstick(uri, rows)
    return {"runs": n, "points": doc["points"], "export_s": ours, "yardstick_s": yard, "ratio": ours / yard,
            "again_s": again}


def status_cost(uri: str, runs: int, tmp: Path) -> dict[str, float]:
    state = tmp / "status"
    job = state / "job"
    job.mkdir(parents=True)
    (job / "train.py").write_text("import time\nfor s in range(100000):\n    print(f'step {s} loss {1/(s+1):.6f}', flush=True)\n"
                                  "    time.sleep(0.05)\n")
    (job / "job.yaml").write_text(json.dumps({"name": "bench", "run": "python train.py"}))
    env = _env(state, GPUJOB_MLFLOW_LINGER="5")
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", "submit", str(job / "job.yaml"), "--host", "local", "--json"],
                       capture_output=True, text=True, env=env)
    jid = json.loads(r.stdout)["job_id"]
    times: dict[str, list[float]] = {"off": [], "on": []}
    try:
        time.sleep(3)
        for _ in range(runs):
            for mode in ("off", "on"):
                e = dict(env, **({"MLFLOW_TRACKING_URI": uri} if mode == "on" else {}))
                e.pop("MLFLOW_TRACKING_URI", None) if mode == "off" else None
                t = time.perf_counter()
                subprocess.run([sys.executable, "-m", "gpujob.cli", "status", jid, "--json"], capture_output=True,
                               env=e, check=True)
                times[mode].append(time.perf_counter() - t)
                time.sleep(0.3)  # the job prints: each look learns something and writes
    finally:
        subprocess.run([sys.executable, "-m", "gpujob.cli", "stop", jid], capture_output=True, env=env)
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    return {"status_off_s": off, "status_on_s": on, "ratio": on / off}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=9)
    a = ap.parse_args()
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"  # the yardstick's client prints each run's URL
    from tests.lab_servers import _end_group, start_mlflow

    tmp = Path(tempfile.mkdtemp(prefix="gj-bench-lab-"))
    proc, srv = start_mlflow(tmp / "mlflow")
    try:
        print(json.dumps({"load": os.getloadavg()[0], "status": status_cost(srv.uri, a.runs, tmp),
                          "backfill": backfill(srv.uri, a.rows, tmp)}, indent=1))
    finally:
        _end_group(proc)


if __name__ == "__main__":
    main()
