"""The cost of the project's sync lease on a no-op resubmit (issue 14).

    python benchmarks/sync/bench_lease.py [--files 300] [--rounds 15]

A no-op resubmit (nothing changed: manifest, then create the job from the snapshot) over the
kept connection to a real sshd on loopback, with and without the lease, alternating in one run:
the ratio is with / without (medians). Each job runs ``true``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpujob-bench-lease-"))
    os.environ.update(GPUJOB_CONFIG_DIR=str(work / "config"), GPUJOB_NO_SSH_AGENT="1", GPUJOB_MUX="1",
                      GPUJOB_MUX_DIR=tempfile.mkdtemp(prefix="gjmux"))
    from bench import make_small

    from gpujob.config.hosts import Host
    from gpujob.config.keys import public_key_line
    from gpujob.config.spec import load_spec
    from gpujob.transport import connect
    from gpujob.transport.agent import Agent
    from gpujob.usecases.sync.upload import sync_job
    from tests.conftest import start_sshd, stop_sshd

    sshd = start_sshd(work / "sshd")
    try:
        sshd.authorize(public_key_line())
        host = Host(name="bench", hostname="127.0.0.1", port=sshd.port, user=os.environ.get("USER", "root"),
                    root=str(work / "root"), env={"GPUJOB_PATH_PREFIX": str(Path(sys.executable).parent)})
        proj = work / "proj"
        make_small(proj, a.files)
        (proj / "job.yaml").write_text(json.dumps({"name": "leasebench", "run": "true"}))
        spec = load_spec(proj / "job.yaml")
        agent = Agent(connect(host), host)

        def resubmit(lease: str | None) -> float:
            t0 = time.perf_counter()
            sync_job(agent, spec, spec.name, None, lease=lease)
            req = {"spec": spec.to_remote(), "project": spec.name, "host": host.name, "host_env": host.env,
                   "lease": lease}
            agent.call("submit", input=json.dumps(req).encode())
            return time.perf_counter() - t0

        resubmit(None)  # the first sync and the agent's install are not timed
        resubmit(secrets.token_hex(8))
        times: dict[str, list[float]] = {"without": [], "with": []}
        for _ in range(a.rounds):
            times["without"].append(resubmit(None))
            times["with"].append(resubmit(secrets.token_hex(8)))
        wo, w = statistics.median(times["without"]), statistics.median(times["with"])
        print(f"no-op resubmit of {a.files} files over the kept connection, median of {a.rounds}:")
        print(f"  without the lease {wo * 1000:.1f} ms, with it {w * 1000:.1f} ms: ratio {w / wo:.2f}")
    finally:
        from gpujob.transport.mux import disconnect

        disconnect(host)  # the kept connection's daemon leaves now, not after 30 idle minutes
        stop_sshd(sshd)


if __name__ == "__main__":
    main()
