"""A flame graph of one gpujob command: where a ``status`` (or any command) spends its wall time.

Runs ``gpujob ARGS`` ``--runs`` times, each a fresh process (what a user types), with a sampling
thread that records the main thread's stack every ``--every`` ms (``sys._current_frames``: wall
time, so waits on the host show as the frame that waits). Imports are folded into one frame per
module (``import gpujob.api.client``), so the start-up shows as the modules it pays for. Writes the
stacks in the folded format (``a;b;c N``, N in µs) that flamegraph.pl and speedscope draw, and prints the
frames with the most samples, inclusive.

    python benchmarks/cli/flame.py --out /tmp/status.folded -- status JOB --host box --json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# what each run executes: the sampler, then gpujob's CLI as ``python -m gpujob.cli`` would
SAMPLER = r"""
import sys, threading, time, json, os
every = float(os.environ["FLAME_EVERY"]) / 1000
# the sampler runs only when the main thread lets go of the GIL: by default after 5 ms, or at a
# system call, which would credit a CPU-bound stretch to the next system call it makes
sys.setswitchinterval(every / 5)
main = threading.main_thread().ident
stacks = {}
def name(f):
    code = f.f_code
    if code.co_name == "<module>":
        mod = f.f_globals.get("__name__", "?")
        return "import " + mod if mod != "__main__" else "<main>"
    return f"{code.co_name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
def sample():
    last = time.perf_counter()
    while True:
        time.sleep(every)
        now = time.perf_counter()
        waited, last = now - last, now  # a sleep runs long under load: each sample weighs the time it covers
        f = sys._current_frames().get(main)
        names = []
        while f is not None:
            if "importlib._bootstrap" not in f.f_code.co_filename:
                names.append(name(f))
            f = f.f_back
        key = ";".join(reversed(names))
        stacks[key] = stacks.get(key, 0) + int(waited * 1e6)
threading.Thread(target=sample, daemon=True).start()
import atexit
atexit.register(lambda: os.write(2, ("\nFLAME " + json.dumps(stacks) + "\n").encode()))
sys.argv = ["gpujob"] + sys.argv[1:]
import runpy
runpy.run_module("gpujob.cli", run_name="__main__")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--every", type=float, default=1.0, help="ms between samples (each costs the command a little of the GIL)")
    ap.add_argument("--out", help="write the folded stacks here")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then the gpujob command's words")
    a = ap.parse_args()
    words = a.args[1:] if a.args[:1] == ["--"] else a.args
    env = dict(os.environ, FLAME_EVERY=str(a.every))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its bytecode
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    total: collections.Counter[str] = collections.Counter()
    subprocess.run([sys.executable, "-m", "gpujob.cli", *words], env=env, capture_output=True)  # warm-up: bytecode
    for _ in range(a.runs):
        r = subprocess.run([sys.executable, "-c", SAMPLER, *words], env=env, capture_output=True, text=True)
        if "FLAME " not in r.stderr:
            raise SystemExit(f"gpujob {' '.join(words)} failed: {r.stderr[-800:]}")
        total.update(json.loads(r.stderr.rsplit("FLAME ", 1)[1]))
    if a.out:
        Path(a.out).write_text("".join(f"{k} {v}\n" for k, v in sorted(total.items())))
    inclusive: collections.Counter[str] = collections.Counter()
    for stack, n in total.items():
        for frame in set(stack.split(";")):
            inclusive[frame] += n
    us = sum(total.values())
    print(f"{us / 1e3 / a.runs:.0f} ms a run sampled (after the interpreter's own start), {a.runs} runs")
    for frame, n in inclusive.most_common(a.top):
        print(f"{100 * n / us:5.1f} %  {n / 1e3 / a.runs:6.1f} ms  {frame}")


if __name__ == "__main__":
    main()
