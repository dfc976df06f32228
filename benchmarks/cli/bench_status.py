"""``gpujob status JOB`` against ``ssh -p PORT host cat <root>/jobs/<id>/status.json`` (OpenSSH).

Both over the same real sshd on 127.0.0.1 (tests/conftest.py start_sshd), in one run,
alternating, each a fresh process with a fresh connection (what a user types). Prints a
Markdown table with medians; the target is gpujob ≤ 1.5× OpenSSH.

    python benchmarks/cli/bench_status.py [--runs 15]
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


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, env=env, stdin=subprocess.DEVNULL, timeout=120)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr.decode()[-800:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    os.environ.update(GPUJOB_CONFIG_DIR=str(tmp / "config"), GPUJOB_LOCAL_ROOT=str(tmp / "local"),
                      GPUJOB_NO_SSH_AGENT="1", GPUJOB_CONNECT_RETRIES="1")
    from gpujob.hosts import Host, HostStore
    from gpujob.transport.ssh import key_path, public_key_line
    from tests.conftest import start_sshd, stop_sshd

    sshd = start_sshd(tmp / "sshd")
    try:
        sshd.authorize(public_key_line())
        user = os.environ.get("USER", "root")
        root = tmp / "remote-root"
        HostStore().save(Host(name="box", hostname="127.0.0.1", port=sshd.port, user=user, root=str(root),
                              env={"GPUJOB_PATH_PREFIX": str(Path(sys.executable).parent)}, connect_timeout=5))
        proj = tmp / "proj"
        proj.mkdir()
        (proj / "main.py").write_text(
            "import json, os, time\n"
            "for s in range(1, 201):\n"
            "    open(os.environ['GPUJOB_METRICS_FILE'], 'a').write(json.dumps({'t': time.time(), 'step': s, 'loss': 1 / s}) + '\\n')\n"
        )
        (proj / "job.yaml").write_text(json.dumps({"name": "bench", "run": "python main.py"}))
        env = dict(os.environ, PYTHONPATH=str(REPO))
        cli = [sys.executable, "-m", "gpujob.cli"]
        sub = subprocess.run(cli + ["submit", str(proj / "job.yaml"), "--host", "box", "--json"], capture_output=True,
                             text=True, env=env, check=True)
        job_id = json.loads(sub.stdout)["job_id"]
        time.sleep(3)
        ssh = ["ssh", "-p", str(sshd.port), "-i", str(key_path()), "-o", "StrictHostKeyChecking=no", "-o",
               "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", f"{user}@127.0.0.1",
               f"cat {root}/jobs/{job_id}/status.json"]
        cases = {
            "ssh … cat status.json (OpenSSH)": ssh,
            "gpujob status JOB --json": cli + ["status", job_id, "--host", "box", "--json"],
            "gpujob status JOB (rendered)": cli + ["status", job_id, "--host", "box"],
        }
        for cmd in cases.values():  # warm: agent installed, page cache
            timed(cmd, env)
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.runs):
            for name, cmd in cases.items():
                times[name].append(timed(cmd, env))
        base = statistics.median(times["ssh … cat status.json (OpenSSH)"])
        print(f"\n{args.runs} runs each, alternating; sshd on 127.0.0.1; {os.cpu_count()} CPUs\n")
        print("| command | median | min | × OpenSSH |")
        print("|---|---|---|---|")
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"| `{name}` | {med * 1000:.0f} ms | {min(ts) * 1000:.0f} ms | {med / base:.2f} |")
        print("\nraw (s):", json.dumps({k: [round(x, 3) for x in sorted(v)] for k, v in times.items()}))
    finally:
        stop_sshd(sshd)


if __name__ == "__main__":
    main()
