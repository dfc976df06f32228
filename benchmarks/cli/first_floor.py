"""What a first ``gpujob status JOB`` pays that OpenSSH's ``ssh host cat status.json`` does not.

Times each fixed cost on its own, alternating, over the same real sshd on 127.0.0.1 as
``bench_status.py``: the interpreter's start, gpujob's CLI modules, paramiko's import (as
gpujob imports it), the key exchange and login in Python (``open_client``), the agent's
``status`` verb on the instance (its Python start and imports, timed there) against ``cat``,
and one command on the open connection. Prints medians in ms.

    python benchmarks/cli/first_floor.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def wall(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    os.environ.update(GPUJOB_CONFIG_DIR=str(tmp / "config"), GPUJOB_LOCAL_ROOT=str(tmp / "local"),
                      GPUJOB_NO_SSH_AGENT="1", GPUJOB_CONNECT_RETRIES="1", GPUJOB_MUX="0")
    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.keys import key_path, public_key_line
    from tests.conftest import start_sshd, stop_sshd

    sshd = start_sshd(tmp / "sshd")
    try:
        sshd.authorize(public_key_line())
        user = os.environ.get("USER", "root")
        root = tmp / "remote-root"
        host = Host(name="box", hostname="127.0.0.1", port=sshd.port, user=user, root=str(root), connect_timeout=5)
        HostStore().save(host)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        py = sys.executable
        proj = tmp / "proj"
        proj.mkdir()
        (proj / "job.yaml").write_text(json.dumps({"name": "floor", "run": "echo hi"}))
        job = json.loads(subprocess.run([py, "-m", "gpujob.cli", "submit", str(proj / "job.yaml"), "--host", "box", "--json"],
                                        env=env, check=True, capture_output=True, text=True).stdout)["job_id"]
        agent = next((root / "agent").iterdir())
        remote = (f"cd {agent} && export PYTHONPATH=$PWD && read -r PY < python && "
                  f"s=$(date +%s%N) && $PY -S -m remote --root {root} status --job {job} >/dev/null && e=$(date +%s%N) && "
                  f"cat {root}/jobs/{job}/status.json >/dev/null && c=$(date +%s%N) && echo $((e - s)) $((c - e))")
        ssh = ["ssh", "-p", str(sshd.port), "-i", str(key_path()), "-o", "StrictHostKeyChecking=no", "-o",
               "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", f"{user}@127.0.0.1"]
        probe = ("import time, sys; t = time.perf_counter(); from gpujob.transport.ssh import open_client; "
                 "i = time.perf_counter(); from gpujob.config.hosts import HostStore; c = open_client(HostStore().get('box')); "
                 "k = time.perf_counter(); c.exec_command('true')[1].read(); e = time.perf_counter(); "
                 "print(i - t, k - i, e - k)")
        t: dict[str, list[float]] = {k: [] for k in (
            "python -c pass (interpreter start)", "gpujob CLI modules (import gpujob.cli, usecases.jobs.ops)",
            "paramiko + gpujob.transport.ssh import", "key exchange + login in Python (open_client)",
            "one command on the open connection (exec `true`)", "agent `status --job` on the instance (timed there)",
            "`cat status.json` on the instance (timed there)", "ssh host cat status.json (OpenSSH, whole)")}
        names = list(t)
        for _ in range(args.runs):
            t[names[0]].append(wall([py, "-c", "pass"], env))
            t[names[1]].append(wall([py, "-c", "import gpujob.cli, gpujob.usecases.jobs.ops"], env) - t[names[0]][-1])
            imp, kex, one = map(float, subprocess.run([py, "-c", probe], env=env, check=True, capture_output=True,
                                                      text=True).stdout.split())
            t[names[2]].append(imp)
            t[names[3]].append(kex)
            t[names[4]].append(one)
            st, cat = map(int, subprocess.run(ssh + [remote], check=True, capture_output=True, text=True).stdout.split())
            t[names[5]].append(st / 1e9)
            t[names[6]].append(cat / 1e9)
            t[names[7]].append(wall(ssh + [f"cat {root}/jobs/{job}/status.json"], env))
        print(f"\n{args.runs} runs each, alternating; sshd on 127.0.0.1; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f}\n")
        print("| cost | median | min |")
        print("|---|---|---|")
        for name, ts in t.items():
            print(f"| {name} | {statistics.median(ts) * 1000:.0f} ms | {min(ts) * 1000:.0f} ms |")
    finally:
        stop_sshd(sshd)


if __name__ == "__main__":
    main()
