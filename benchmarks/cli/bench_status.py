"""``gpujob status JOB`` against ``ssh -p PORT host cat <root>/jobs/<id>/status.json`` (OpenSSH).

Both over the same real sshd on 127.0.0.1 (tests/conftest.py start_sshd), in one run,
alternating, each a fresh process (what a user types). gpujob is timed four ways: with its
kept connection (the multiplexer daemon already running, as for every command after the
first in thirty minutes), as the first command (the daemon is told to leave before each run:
the command connects on its own and starts the daemon in the background as it exits; the
bench waits for that daemon to listen before the next case, untimed), as the second command
(the daemon's first: it opens the kept agent ``serve``), and with the multiplexer off
(``GPUJOB_MUX=0``: a connection of its own). OpenSSH is timed plain and with its own ControlMaster. Prints a
Markdown table with medians; the target is gpujob ≤ 1.5× plain OpenSSH.

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


def timed(cmd: list[str], env: dict[str, str], before: object = None, after: object = None) -> float:
    if callable(before):
        before()
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, env=env, stdin=subprocess.DEVNULL, timeout=120)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr.decode()[-800:]}")
    if callable(after):
        after()
    return dt


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie does not: no init here may reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def settle(mux_dir: Path) -> None:
    """Wait until no daemon is starting (a starting one holds its lock until it listens), so a
    background start never overlaps the next timed command."""
    import fcntl

    for lock in mux_dir.glob("*.lock"):
        with open(lock, "a") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--counts", action="store_true",
                    help="also count what one status costs regardless of load: CPU seconds, modules imported, "
                         "files written (strace)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    # a user's install has its bytecode (pip compiles it): with PYTHONDONTWRITEBYTECODE set (this dev image
    # sets it) every timed gpujob command compiled its ~45 modules from source, 0.2 s of CPU (issue 38)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ.update(GPUJOB_CONFIG_DIR=str(tmp / "config"), GPUJOB_LOCAL_ROOT=str(tmp / "local"),
                      GPUJOB_NO_SSH_AGENT="1", GPUJOB_CONNECT_RETRIES="1",
                      GPUJOB_MUX_DIR=tempfile.mkdtemp(prefix="gjmux"))
    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.keys import key_path, public_key_line
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
        ctl = str(tmp / "cm-%C")
        ssh_cm = ssh[:1] + ["-o", "ControlMaster=auto", "-o", f"ControlPath={ctl}", "-o", "ControlPersist=600"] + ssh[1:]
        from gpujob.transport import mux

        def drop_mux() -> None:
            """The daemon leaves, and its process is gone before the timed command starts."""
            settle(mux.mux_dir() or tmp)
            for sock in (mux.mux_dir() or tmp).glob("*.sock"):
                try:
                    s = mux._request(sock, {"op": "ping"}, timeout=5)
                    pid = (mux._read_line(s) or {}).get("pid")
                    s.close()
                    mux._request(sock, {"op": "exit"}, timeout=5).close()
                except OSError:
                    continue
                deadline = time.monotonic() + 10
                while pid and alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.02)
            time.sleep(0.2)  # its sshd session and kept agent end too

        status = cli + ["status", job_id, "--host", "box"]
        nomux = dict(env, GPUJOB_MUX="0")
        def started() -> None:  # the daemon the first command left: listening before the next case
            settle(mux.mux_dir() or tmp)

        cases: dict[str, tuple[list[str], dict[str, str], object, object]] = {
            "ssh … cat status.json (OpenSSH)": (ssh, env, None, None),
            "ssh … cat status.json (OpenSSH, ControlMaster kept)": (ssh_cm, env, None, None),
            "gpujob status JOB --json (kept connection)": (status + ["--json"], env, None, None),
            "gpujob status JOB (rendered, kept connection)": (status, env, None, None),
            "gpujob status JOB --json (first command: no daemon yet)": (status + ["--json"], env, drop_mux, started),
            "gpujob status JOB --json (second command: the new daemon's first)": (status + ["--json"], env, None, None),
            "gpujob status JOB --json (GPUJOB_MUX=0: own connection)": (status + ["--json"], nomux, None, None),
            "python -c pass (this interpreter's bare start, for scale)": ([sys.executable, "-c", "pass"], env, None, None),
        }
        for cmd, e, before, after in cases.values():  # warm: agent installed, page cache, daemons started
            timed(cmd, e, before, after)
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.runs):
            for name, (cmd, e, before, after) in cases.items():
                times[name].append(timed(cmd, e, before, after))
        if args.counts:
            from status_counts import print_counts

            print_counts({k: v for k, v in cases.items() if "gpujob" in k or "OpenSSH" in k})
        if not args.runs:
            return
        base = statistics.median(times["ssh … cat status.json (OpenSSH)"])
        print(f"\n{args.runs} runs each, alternating; sshd on 127.0.0.1; {os.cpu_count()} CPUs\n")
        print("| command | median | min | × OpenSSH |")
        print("|---|---|---|---|")
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"| `{name}` | {med * 1000:.0f} ms | {min(ts) * 1000:.0f} ms | {med / base:.2f} |")
        print("\nraw (s):", json.dumps({k: [round(x, 3) for x in sorted(v)] for k, v in times.items()}))
    finally:
        from gpujob.transport import mux

        for sock in (mux.mux_dir() or tmp).glob("*.sock"):
            mux._request(sock, {"op": "exit"}, timeout=5).close()
        stop_sshd(sshd)


if __name__ == "__main__":
    main()
