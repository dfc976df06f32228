"""The first command to a far host: ``gpujob status JOB --json`` on a fresh connection against
OpenSSH's ``ssh host cat <job>/status.json``, through the emulated link (``benchmarks/sync/linkemu.py``) in front
of a real sshd; gpujob with the key login pipelined (its default) and without
(``GPUJOB_SSH_PIPELINE_AUTH=0``), alternating, medians in ms.

    python benchmarks/cli/far_first.py [--rtt-ms 150] [--runs 9]

Each run is a fresh process and a fresh connection (``GPUJOB_MUX=0``: no kept connection); the
agent is installed before timing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks" / "sync"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from first_floor import wall  # noqa: E402  (its fresh-process timer, in s)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rtt-ms", type=float, default=150)
    ap.add_argument("--runs", type=int, default=9)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpujob-far-first-"))
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its bytecode (bench_status.py)
    env = dict(os.environ, GPUJOB_CONFIG_DIR=str(work / "config"), GPUJOB_STATE_DIR=str(work / "state"),
               GPUJOB_CACHE_DIR=str(work / "cache"), GPUJOB_NO_SSH_AGENT="1", GPUJOB_MUX="0",
               PYTHONPATH=str(REPO))
    os.environ.update({k: env[k] for k in ("GPUJOB_CONFIG_DIR", "GPUJOB_STATE_DIR", "GPUJOB_CACHE_DIR")})
    from linkemu import LinkProcess

    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.keys import key_path, known_hosts_path, public_key_line
    from tests.conftest import start_sshd, stop_sshd

    sshd = start_sshd(work / "sshd")
    link = None
    try:
        sshd.authorize(public_key_line())
        link = LinkProcess(sshd.port, a.rtt_ms / 2, 0)
        user = os.environ.get("USER", "root")
        HostStore().save(Host(name="far", hostname="127.0.0.1", port=link.port, user=user,
                              root=str(work / "remote-root"), connect_timeout=20, agent_python=sys.executable,
                              env={"GPUJOB_PATH_PREFIX": str(Path(sys.executable).parent)}))
        proj = work / "proj"
        proj.mkdir()
        (proj / "main.py").write_text("print('done')\n")
        (proj / "job.yaml").write_text(json.dumps({"name": "far", "run": "python main.py"}))
        cli = [sys.executable, "-m", "gpujob.cli"]
        sub = subprocess.run(cli + ["submit", str(proj / "job.yaml"), "--host", "far", "--json"], capture_output=True,
                             text=True, env=env, check=True)  # host key recorded, agent installed
        job_id = json.loads(sub.stdout)["job_id"]
        gj = cli + ["status", job_id, "--host", "far", "--json"]
        wall(gj, env)
        ssh = ["ssh", "-p", str(link.port), "-i", str(key_path()), "-o", "IdentitiesOnly=yes",
               "-o", f"UserKnownHostsFile={known_hosts_path()}", "-o", "StrictHostKeyChecking=yes",
               "-o", "BatchMode=yes", "-o", "ControlMaster=no", "-o", "ControlPath=none", f"{user}@127.0.0.1",
               f"cat {work}/remote-root/jobs/{job_id}/status.json"]
        cases = {"gpujob (pipelined login)": (gj, env), "gpujob, GPUJOB_SSH_PIPELINE_AUTH=0": (gj, dict(env, GPUJOB_SSH_PIPELINE_AUTH="0")),
                 "OpenSSH ssh host cat status.json": (ssh, env)}
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(a.runs):
            for k, (cmd, e) in cases.items():
                times[k].append(wall(cmd, e) * 1000)
        base = statistics.median(times["OpenSSH ssh host cat status.json"])
        print(f"first command at {a.rtt_ms:.0f} ms RTT, {a.runs} alternating runs, load {os.getloadavg()[0]:.1f}")
        print("| case | median ms | × ssh |\n|---|---:|---:|")
        for k, v in times.items():
            m = statistics.median(v)
            print(f"| {k} | {m:.0f} | {m / base:.2f} |")
    finally:
        if link is not None:
            link.close()
        stop_sshd(sshd)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
