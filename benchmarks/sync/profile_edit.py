"""Where the laptop's time goes in a sync of one changed file in a large tree: cProfile of
``sync_job`` to the ``local`` host (its agent is a child process, not in the profile).

    python benchmarks/sync/profile_edit.py [--files 100000] [--top 25] [--keep DIR]

The tree has bench.py's layout (30 × 7 folders) with one-line files; both ends are left to
settle (stamps older than the racy window) before the timed sync, as at human pace.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def settle() -> None:
    time.sleep(2.2)  # past the racy window of whole-second stamps (stream.RACY_NS): a benchmark, not a test


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--keep", help="work folder to keep (default: a temporary one, removed)")
    a = ap.parse_args()
    work = Path(a.keep or tempfile.mkdtemp(prefix="gj-prof-"))
    os.environ["GPUJOB_CONFIG_DIR"] = str(work / "config")
    os.environ["GPUJOB_MUX"] = "0"
    from gpujob.config.hosts import Host
    from gpujob.config.spec import JobSpec
    from gpujob.transport import connect
    from gpujob.transport.agent import Agent
    from gpujob.usecases.sync.upload import sync_job

    src = work / "src"
    try:
        for i in range(a.files):
            d = src / f"pkg{i % 30}" / f"mod{i % 7}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"file_{i}.py").write_text(f"x = {i}\n")
        host = Host(name="local", hostname="localhost", kind="local", root=str(work / "root"))
        spec = JobSpec(name="p", run="true", workdir=str(src))

        def sync() -> tuple[float, object]:
            t = time.perf_counter()
            r = sync_job(Agent(connect(host), host), spec, "p")
            return time.perf_counter() - t, r

        for label in ("first sync", "no-op"):
            settle()
            dt, r = sync()
            print(f"{label}: {dt:.2f} s, {r.files_sent} sent", flush=True)  # type: ignore[attr-defined]
        f = src / "pkg7" / "mod0" / "file_7.py"
        f.write_text(f.read_text() + "# edited\n")
        settle()
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        r = sync_job(Agent(connect(host), host), spec, "p")
        prof.disable()
        print(f"one file changed: {time.perf_counter() - t:.2f} s under the profiler, {r.files_sent} sent")
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(a.top)
        print(out.getvalue())
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
