"""``gpujob ls`` on a host with 10 jobs against the same on a host with 2,000 jobs.

One real sshd on 127.0.0.1 (tests/conftest.py start_sshd), two host profiles whose roots hold
10 and 2,000 finished jobs (status.json, spec.json, a 10 KB output.log, 100 metric lines
each; the newest one still running). Each command is a fresh process with gpujob's kept
connection warm (every command after the first in thirty minutes), timed alternating; the
first listing of each host (which indexes folders made before the index) is not timed.
``ls --all`` (every job described, what ``ls`` did before the index) is timed for scale.
Target: ``ls`` with 2,000 jobs ≤ 1.5× ``ls`` with 10.

    python benchmarks/cli/bench_ls.py [--runs 11] [--jobs 2000]

``--running N``: the newest N jobs run, their metrics only in a 1 MiB log the collector has not
read yet (no metrics file): each listing parses the end of each one's log (``ls``'s STEP column
agrees with ``status``).
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
sys.path.insert(0, str(Path(__file__).resolve().parent))


def make_jobs(root: Path, n: int, n_running: int = 1) -> None:
    t0 = time.time() - 10 * n
    log = "".join(f"step {k} loss {1 / (k + 1):.4f}\n" for k in range(500))
    big = "".join(f"{{'loss': {1 / (k + 1):.4f}, 'learning_rate': 5e-05, 'epoch': {k / 1000:.2f}}}\n"
                  f"step {k} loss {1 / (k + 1):.4f}\n" for k in range(12000))  # ~1 MiB
    metrics = "".join(json.dumps({"step": k, "loss": 1 / (k + 1)}) + "\n" for k in range(100))
    for i in range(n):
        job_id = f"train-1130{i:04d}-{i:05d}"
        d = root / "jobs" / job_id
        d.mkdir(parents=True)
        running = i >= n - n_running
        log_only = running and n_running > 1
        st = {"job_id": job_id, "name": "train", "project": "train", "state": "running" if running else "succeeded",
              "submitted_at": t0 + 10 * i, "started_at": t0 + 10 * i + 1, "attempt": 1}
        if running:
            st.update(heartbeat=time.time() + 86400, supervisor_pid=os.getpid())
        else:
            st.update(ended_at=t0 + 10 * i + 8, exit_code=0)
        (d / "status.json").write_text(json.dumps(st))
        (d / "spec.json").write_text(json.dumps({"name": "train", "run": "python train.py", "gpus": 1}))
        (d / "output.log").write_text(big if log_only else log)
        if not log_only:
            (d / "metrics.jsonl").write_text(metrics)
        (d / "events.jsonl").write_text(json.dumps({"t": t0, "event": "submitted"}) + "\n")


def hold_supervisors(roots: list[Path]) -> subprocess.Popen:
    """A process holding each running job's supervisor lock, as its supervisor would: the jobs read
    ``running``, not ``lost`` (a record's pid alone is no proof). It lets go when its stdin closes."""
    locks = [str(p / "supervisor.lock") for r in roots for p in (r / "jobs").iterdir()
             if json.loads((p / "status.json").read_text())["state"] == "running"]
    code = ("import fcntl, json, sys\nfs = [open(p, 'a') for p in json.loads(sys.argv[1])]\n"
            "[fcntl.flock(f, fcntl.LOCK_EX) for f in fs]\nprint('held', flush=True)\nsys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code, json.dumps(locks)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    return holder


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--running", type=int, default=1)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-ls-"))
    os.environ.update(GPUJOB_CONFIG_DIR=str(tmp / "config"), GPUJOB_LOCAL_ROOT=str(tmp / "local"),
                      GPUJOB_NO_SSH_AGENT="1", GPUJOB_CONNECT_RETRIES="1", GPUJOB_MUX_DIR=tempfile.mkdtemp(prefix="gjmux"),
                      PYTHONPATH=str(REPO))
    from bench_status import timed as timed_env

    def timed(cmd: list[str]) -> float:
        return timed_env(cmd, dict(os.environ))

    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.keys import public_key_line
    from tests.conftest import start_sshd, stop_sshd

    sshd = start_sshd(tmp / "sshd")
    try:
        sshd.authorize(public_key_line())
        sizes = {"few": 10, "many": a.jobs}
        for name, n in sizes.items():
            make_jobs(tmp / name, n, a.running if name == "many" else 1)
            HostStore().save(Host(name=name, hostname="127.0.0.1", port=sshd.port, user=os.environ.get("USER", "root"),
                                  root=str(tmp / name), connect_timeout=10))
        holder = hold_supervisors([tmp / name for name in sizes])
        cmds = {f"ls, {n} jobs": [sys.executable, "-m", "gpujob.cli", "ls", "--host", name, "--json"]
                for name, n in sizes.items()}
        cmds[f"ls --all, {a.jobs} jobs"] = cmds[f"ls, {a.jobs} jobs"] + ["--all"]
        for cmd in cmds.values():  # connect, install the agent, index the folders
            timed(cmd)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(a.runs):
            for k, cmd in cmds.items():
                times[k].append(timed(cmd))
        subprocess.run([sys.executable, "-m", "gpujob.cli", "host", "disconnect", "few"], capture_output=True)
        subprocess.run([sys.executable, "-m", "gpujob.cli", "host", "disconnect", "many"], capture_output=True)
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()
    finally:
        stop_sshd(sshd)
    base = statistics.median(times["ls, 10 jobs"])
    print("| command | median | min | × ls with 10 jobs |")
    print("|---|---:|---:|---:|")
    for k, v in times.items():
        med = statistics.median(v)
        print(f"| `gpujob {k}` | {med * 1000:.0f} ms | {min(v) * 1000:.0f} ms | {med / base:.2f} |")


if __name__ == "__main__":
    main()
