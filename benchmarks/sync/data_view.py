"""What a job's data view costs at submit (remote/data/datastore.py), against the code snapshot every
submit already takes (remote/jobs/submit.py ``snapshot``: a hard-linked copy of the same tree).

    python benchmarks/sync/data_view.py --files 5000 --rounds 3

A staged tree of N small files with its hashes cached (as the sync's receiver leaves them); per
round: the snapshot of it (yardstick), then a job's view (store + links). The first view also
puts every file into the store; later ones only link. Prints medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from remote.data import datastore  # noqa: E402
from remote.data.transfer import hash_cache  # noqa: E402
from remote.jobs.submit import snapshot  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gpujob-dataview-"))
    try:
        staged = root / "projects" / "p" / "data" / "ds"
        staged.mkdir(parents=True)
        for i in range(a.files):
            (staged / f"shard-{i:06d}.bin").write_bytes(os.urandom(1024))
        cache = hash_cache(root)
        for p in staged.iterdir():
            cache.hash(p)
        cache.save()
        first = None
        snaps, views = [], []
        for n in range(a.rounds + 1):
            t = time.perf_counter()
            snapshot(staged, root / "snap" / str(n))
            snap = time.perf_counter() - t
            job = root / "jobs" / str(n)
            job.mkdir(parents=True)
            t = time.perf_counter()
            datastore.build_view(root, "p", ["ds"], job, hash_cache(root))
            view = time.perf_counter() - t
            if first is None:
                first = view / snap
                continue
            snaps.append(snap)
            views.append(view)
        s, v = statistics.median(snaps), statistics.median(views)
        print(f"{a.files} files, load {os.getloadavg()[0]:.1f}: snapshot {s:.2f}s (1.00), view {v:.2f}s "
              f"({v / s:.2f}); the first view, storing every file: {first:.2f}")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
