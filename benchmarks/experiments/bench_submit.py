"""What the ledger adds to a submit: ``gpujob submit examples/tiny/job.yaml`` (a project in git)
on ``local``, no-op resubmits, the tree before the ledger (``/tmp/base``: ``git archive e81b432 |
tar -x -C /tmp/base``) against this one, alternating; medians of 7 (wall and the CLI's CPU).

    python benchmarks/experiments/bench_submit.py
"""

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
job = os.path.join(REPO, "examples", "tiny", "job.yaml")
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
for tree in ("/tmp/base", REPO, "/tmp/base", REPO):
    d = tempfile.mkdtemp()
    env = dict(os.environ, PYTHONPATH=tree, GPUJOB_CONFIG_DIR=d + "/c", GPUJOB_STATE_DIR=d + "/s", GPUJOB_CACHE_DIR=d + "/k",
               GPUJOB_LOCAL_ROOT=d + "/r", PYENV_REHASH_TIMEOUT="1")
    cmd = [sys.executable, "-m", "gpujob.cli", "submit", job, "--host", "local", "--set", "run=echo hi", "--json"]
    subprocess.run(cmd, env=env, capture_output=True)
    walls, cpus = [], []
    for _ in range(7):
        b = resource.getrusage(resource.RUSAGE_CHILDREN); t = time.perf_counter()
        r = subprocess.run(cmd, env=env, capture_output=True)
        walls.append(time.perf_counter() - t); a = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime)
        assert r.returncode == 0, r.stdout[-500:]
    print(tree, "wall %.0f ms  cpu %.0f ms" % (statistics.median(walls) * 1000, statistics.median(cpus) * 1000))
