"""The agent's own CPU use while a job runs: utime+stime of the supervisor over a window.

    python benchmarks/agent/overhead.py [--seconds 60] [--smi]

Submits a job that only sleeps to the ``local`` host (a temporary root and config), waits
until it runs, then reads /proc/<supervisor pid>/stat twice, ``--seconds`` apart. With
``--smi`` an nvidia-smi stand-in is put on PATH so the GPU sampler runs too (every 5 s, its
children's time counted). Prints one JSON line.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def cpu_seconds(pid: int) -> tuple:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    # fields after ')': state=0 ... utime=11 stime=12 cutime=13 cstime=14
    return (int(fields[11]) + int(fields[12])) / tck, (int(fields[13]) + int(fields[14])) / tck


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--smi", action="store_true", help="sample an nvidia-smi stand-in every 5 s")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpujob-overhead-"))
    env = dict(os.environ, GPUJOB_CONFIG_DIR=str(tmp / "cfg"), GPUJOB_LOCAL_ROOT=str(tmp / "root"),
               PYTHONPATH=str(REPO))
    env.pop("GPUJOB_HEARTBEAT", None)  # the default heartbeat (5 s)
    if a.smi:
        (tmp / "bin").mkdir()
        smi = tmp / "bin" / "nvidia-smi"
        smi.write_text("#!/bin/sh\necho '0, 97, 70000, 81920, 300.0, 70'\n")
        smi.chmod(0o755)
        env["PATH"] = f"{tmp / 'bin'}:{env['PATH']}"
    proj = tmp / "proj"
    proj.mkdir()
    (proj / "job.yaml").write_text(json.dumps({"name": "sleeper", "run": f"sleep {int(a.seconds) + 60}"}))
    res = json.loads(subprocess.run([sys.executable, "-m", "gpujob.cli", "submit", str(proj / "job.yaml"), "--json"],
                                    env=env, check=True, capture_output=True, text=True).stdout)
    job_id, pid = res["job_id"], res["supervisor_pid"]
    status = tmp / "root" / "jobs" / job_id / "status.json"
    while json.loads(status.read_text()).get("state") != "running":
        time.sleep(0.2)
    time.sleep(2)
    s0, c0, t0 = *cpu_seconds(pid), time.time()
    time.sleep(a.seconds)
    s1, c1, t1 = *cpu_seconds(pid), time.time()
    subprocess.run([sys.executable, "-m", "gpujob.cli", "stop", job_id, "--json"], env=env, capture_output=True)
    wall = t1 - t0
    print(json.dumps({"seconds": round(wall, 1), "supervisor_cpu_s": round(s1 - s0, 3),
                      "children_cpu_s": round(c1 - c0, 3), "percent_of_one_core": round(100 * (s1 - s0 + c1 - c0) / wall, 3),
                      "smi": a.smi}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
