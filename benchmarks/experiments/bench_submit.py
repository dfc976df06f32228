"""What the ledger adds to a submit: ``gpujob submit examples/tiny/job.yaml`` (a project in git)
on ``local``, no-op resubmits, the tree before the ledger (``/tmp/base``: ``git archive e81b432 |
tar -x -C /tmp/base``) against this one, alternating; medians of 7 (wall and the CLI's CPU).

    python benchmarks/experiments/bench_submit.py [--base /tmp/base]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = os.path.join(REPO, "examples", "tiny", "job.yaml")


def measure(tree: str, runs: int = 7) -> tuple[float, float]:
    d = tempfile.mkdtemp(prefix="gjsubmit")
    env = dict(os.environ, PYTHONPATH=tree, GPUJOB_CONFIG_DIR=d + "/c", GPUJOB_STATE_DIR=d + "/s",
               GPUJOB_CACHE_DIR=d + "/k", GPUJOB_LOCAL_ROOT=d + "/r", PYENV_REHASH_TIMEOUT="1")
    cmd = [sys.executable, "-m", "gpujob.cli", "submit", JOB, "--host", "local", "--set", "run=echo hi", "--json"]
    subprocess.run(cmd, env=env, capture_output=True)  # the first one syncs; the rest are no-ops
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        r = subprocess.run(cmd, env=env, capture_output=True)
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if r.returncode:
            raise SystemExit(r.stdout[-500:])
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="/tmp/base")
    a = ap.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its bytecode
    for tree in (a.base, REPO, a.base, REPO):
        wall, cpu = measure(tree)
        print(f"{tree}: wall {wall * 1000:.0f} ms, CPU {cpu * 1000:.0f} ms")


if __name__ == "__main__":
    main()
