"""Peak memory of the laptop side of a sync: one process syncs a tree to the ``local`` host
(the agent runs as a child process, so it is not counted) once, then again (a no-op).

    python benchmarks/sync/memory.py SRC_TREE WORK_DIR     # e.g. a tree from bench.py's make_small
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    src, work = sys.argv[1], sys.argv[2]
    os.environ["GPUJOB_CONFIG_DIR"] = work + "/config"
    os.environ["GPUJOB_MUX"] = "0"
    from gpujob.config.hosts import Host
    from gpujob.config.spec import JobSpec
    from gpujob.transport import connect
    from gpujob.transport.agent import Agent
    from gpujob.usecases.sync.upload import sync_job

    host = Host(name="local", hostname="localhost", kind="local", root=work + "/root")
    spec = JobSpec(name="p", run="true", workdir=src)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for label in ("first sync", "no-op"):
        t = time.monotonic()
        r = sync_job(Agent(connect(host), host), spec, "p")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{label}: {time.monotonic() - t:.2f} s, {r.files_sent} files sent, peak {peak:.0f} MB "
              f"(after imports {base:.0f} MB)", flush=True)


if __name__ == "__main__":
    main()
