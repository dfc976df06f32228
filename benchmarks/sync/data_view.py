"""What a job's data view costs at submit (remote/data/datastore.py), against the code snapshot every
submit already takes (remote/jobs/submit.py ``snapshot``: a hard-linked copy of the same tree).

    python benchmarks/sync/data_view.py --files 5000 --rounds 3
    python benchmarks/sync/data_view.py --gb 10 --shards 40

A staged tree of N small files with its hashes cached (as the sync's receiver leaves them); per
round: the snapshot of a copy of it (yardstick), then a job's view (store + links). The first view also
puts every file into the store; later ones only link. Prints medians and their ratio.

``--gb``: what keeping the store sound costs on a large data set (remote/data/blobcheck.py):
real bytes (no sparse file) in ``--shards`` files, and against ``cp -r`` of them (the
yardstick, the same run): a view while every blob's print holds (one stat each), a view after
a job rewrote one shard in place (that shard hashed again, taken out of the store and stored
again), and a view with every print lost (every blob hashed again: the worst case). Everything
made is deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from remote.data import blobcheck, datastore  # noqa: E402
from remote.data.transfer import hash_cache  # noqa: E402
from remote.jobs.submit import snapshot  # noqa: E402
from remote.stream.hashing import Hasher  # noqa: E402


def _timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _shard(path: Path, i: int, block: bytes, size: int) -> str:
    """Write shard ``i`` (real bytes; each shard starts differently, so none is stored twice) as
    the receiver does: a new file renamed into place, hashed as it is written."""
    tmp, h, left = path.with_name(path.name + ".tmp"), Hasher(), size
    with open(tmp, "wb") as f:
        while left > 0:
            piece = (i.to_bytes(8, "big") + block[8:])[:left]
            f.write(piece)
            h.update(piece)
            left -= len(piece)
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return h.hexdigest()


def big(gb: float, shards: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="gpujob-dataview-big-"))
    try:
        staged = root / "projects" / "p" / "data" / "ds"
        staged.mkdir(parents=True)
        cache = hash_cache(root)
        block = os.urandom(64 << 20)
        size = int(gb * (1 << 30)) // shards
        for i in range(shards):
            cache.put(staged / f"shard-{i:04d}.bin", _shard(staged / f"shard-{i:04d}.bin", i, block, size))
        cache.save()
        n = [0]

        def view() -> None:
            n[0] += 1
            job = root / "jobs" / str(n[0])
            job.mkdir(parents=True)
            datastore.build_view(root, "p", ["ds"], job, hash_cache(root))

        subprocess.run(["sync"], check=False)
        cp = _timed(lambda: subprocess.run(["cp", "-r", str(staged), str(root / "copy")], check=True))
        shutil.rmtree(root / "copy")
        first = _timed(view)
        held = statistics.median(_timed(view) for _ in range(3))
        with open(root / "jobs" / "1" / "data" / "ds" / "shard-0000.bin", "r+b") as f:
            f.write(b"damaged!")  # a job rewrites one shard in place (root: no write bit needed)
        cache = hash_cache(root)  # the sync then sends that shard's bytes again, as the receiver leaves them
        cache.put(staged / "shard-0000.bin", _shard(staged / "shard-0000.bin", 0, block, size))
        cache.save()
        one = _timed(view)
        with open(root / "jobs" / str(n[0]) / "data" / "ds" / "shard-0000.bin", "rb") as f:
            assert f.read(8) == bytes(8), "the view after the rewrite holds the rewritten bytes"
        for f in (root / "cache").glob(blobcheck.PRINTS + "*"):  # every print lost: each blob is hashed again
            f.unlink()
        lost = _timed(view)
        print(f"{gb:g} GB in {shards} files, load {os.getloadavg()[0]:.1f}: cp -r {cp:.2f}s (1.00); "
              f"first view (stores every file) {first:.2f}s ({first / cp:.3f}); view, prints hold {held:.3f}s "
              f"({held / cp:.4f}); view after one shard rewritten in place {one:.2f}s ({one / cp:.3f}); "
              f"view with every print lost (all rehashed) {lost:.2f}s ({lost / cp:.3f})")
    finally:
        shutil.rmtree(root)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gb", type=float, default=0, help="the large data set's size (0: the small-files run)")
    ap.add_argument("--shards", type=int, default=40)
    a = ap.parse_args()
    if a.gb:
        big(a.gb, a.shards)
        return
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
        code = root / "code"  # the yardstick's own tree of the same files: a snapshot links its inodes,
        shutil.copytree(staged, code)  # which would move the blobs' ctime (the views would then hash them again)
        first = None
        snaps, views = [], []
        for n in range(a.rounds + 1):
            t = time.perf_counter()
            snapshot(code, root / "snap" / str(n))
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
