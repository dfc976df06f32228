"""A sweep with a median pruner against the same full grid without one: trial steps spent, best metric.

The task: ``templates``-style plain loop (``tests/gpujob/usecases/experiments/test_experiments.py``'s LOOP: gradient descent on
a quadratic, one printed loss per step, Ctrl-C saves and leaves), 40 steps of 50 ms, a grid of 8
learning rates, 2 trials at once on ``local``; gpujob's log reader gives the sweep its curves.
Target: pruning spends ≥ 30 % fewer trial steps than the full grid and finds the same best.

    python benchmarks/experiments/bench_sweep.py [--steps 40]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.gpujob.usecases.experiments.test_experiments import LOOP  # noqa: E402

GRID = [0.4, 0.3, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005]


def run(tmp: Path, pruner: str, steps: int) -> dict:
    proj = tmp / f"p-{pruner}"
    proj.mkdir()
    (proj / "main.py").write_text(textwrap.dedent(LOOP))
    sweep = {"method": "grid", "parallel": 2, "pruner": pruner, "startup_trials": 2, "warmup_steps": 3, "seed": 10,
             "params": {"lr": GRID}}
    job = {"name": f"bench-{pruner}", "run": f"python main.py --steps {steps} --sleep 0.05",
           "checkpoint": {"pattern": "ckpt_*.json"}, "sweep": sweep, "env": {"OMP_NUM_THREADS": "1"}}
    (proj / "job.yaml").write_text(json.dumps(job))
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUJOB_CONFIG_DIR=str(tmp / "cfg"), GPUJOB_STATE_DIR=str(tmp / "state"),
               GPUJOB_CACHE_DIR=str(tmp / "cache"), GPUJOB_LOCAL_ROOT=str(tmp / "root"), GPUJOB_METRICS_EVERY="0.2",
               GPUJOB_SWEEP_POLL="0.3", PYENV_REHASH_TIMEOUT="1")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", "sweep", str(proj / "job.yaml"), "--name", f"b-{pruner}",
                        "--json"], capture_output=True, text=True, env=env)
    if r.returncode:
        raise SystemExit(r.stderr + r.stdout)
    doc = json.loads(r.stdout)
    doc["wall_s"] = time.monotonic() - t0
    return doc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gjsweep") as d:
        full = run(Path(d), "none", a.steps)
        pruned = run(Path(d), "median", a.steps)
    for name, doc in (("full grid", full), ("median pruner", pruned)):
        n_pruned = sum(t["state"] == "pruned" for t in doc["trials"])
        print(f"{name:14} steps {doc['spent']['steps']:4d}  pruned {n_pruned}  best lr={doc['best']['params']['lr']} "
              f"loss={doc['best']['value']:.5g}  wall {doc['wall_s']:.1f} s")
    saved = 1 - pruned["spent"]["steps"] / full["spent"]["steps"]
    same = abs(pruned["best"]["value"] - full["best"]["value"]) <= 1e-9 + 1e-6 * abs(full["best"]["value"])
    print(f"pruning saves {saved:.0%} of trial steps; same best metric: {same}")


if __name__ == "__main__":
    main()
