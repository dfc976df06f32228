"""What the Trainer stop hook (templates/runtime/autohook) costs a script that is not a Trainer.

Every Python process of a job starts with the hook's ``sitecustomize`` on PYTHONPATH: it
registers a ``sys.meta_path`` finder that looks at every later import. Measured here, against
a yardstick in the same run (the same interpreter and PYTHONPATH without the hook folder),
interleaved to share the machine's load:

- start-up: ``python -c pass`` wall time, median of RUNS (noisy on a shared machine);
- per import, in one process: the finder's ``find_spec`` for a module that is not a Trainer
  (what every import of a job pays), against importing a small standard-library module afresh
  (``colorsys``, removed from ``sys.modules`` each time): the ratio is the hook's share.

    python benchmarks/runtime/bench_autohook.py [--runs 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "templates" / "runtime" / "autohook"
RUNTIME = REPO / "templates" / "runtime"


def timed(code: str, path: str) -> float:
    env = dict(os.environ, PYTHONPATH=path)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40)
    args = ap.parse_args()
    with_hook = os.pathsep.join([str(HOOK), str(RUNTIME)])
    without = str(RUNTIME)
    print(f"python {sys.version.split()[0]}, {args.runs} runs each, interleaved")
    hook, base = [], []
    for _ in range(args.runs):
        base.append(timed("pass", without))
        hook.append(timed("pass", with_hook))
    mh, mb = statistics.median(hook), statistics.median(base)
    print(f"start-up (-c pass)   yardstick {mb * 1000:7.1f} ms   with hook {mh * 1000:7.1f} ms   ratio {mh / mb:.3f}")
    finder, imp = per_import()
    print(f"per import           yardstick {imp * 1e6:7.2f} us   finder    {finder * 1e6:7.3f} us   ratio {finder / imp:.4f}")


def per_import(n: int = 20000) -> tuple[float, float]:
    """Seconds per call: the hook's find_spec for an ordinary name, and a fresh small import."""
    import importlib
    import importlib.util

    spec = importlib.util.spec_from_file_location("gj_bench_sitecustomize", HOOK / "sitecustomize.py")
    mod = importlib.util.module_from_spec(spec)
    saved = list(sys.meta_path)
    spec.loader.exec_module(mod)  # installs its finder; the chained sitecustomize runs too
    sys.meta_path[:] = saved
    finder = mod.Finder()
    t = time.perf_counter()
    for _ in range(n):
        finder.find_spec("colorsys", None)
    per_find = (time.perf_counter() - t) / n
    t = time.perf_counter()
    for _ in range(n // 10):
        sys.modules.pop("colorsys", None)
        importlib.import_module("colorsys")
    per_import_s = (time.perf_counter() - t) / (n // 10)
    return per_find, per_import_s


if __name__ == "__main__":
    main()
