"""gpujob on a Slurm host (issue 45) against what a user does by hand, on a real Slurm 22.05 cluster.

The cluster is the tests' (tests/slurm/cluster.py: one slurmctld, one slurmd ``n1`` with 2 CPUs, all on
127.0.0.1, KillWait 10 s); its login node is a real sshd whose sessions get ``SLURM_CONF`` (tests/conftest.py
start_sshd), reached by the host profile ``cluster`` (scheduler slurm, partition debug) as
tests/slurm/conftest.py ``_login`` saves it. Config, state, cache and the multiplexer's sockets live in a
temp folder of this run. The cluster is warmed with one job before anything is timed (its first batch job
starts ~3 s after slurmctld does), and gpujob with one submit (agent upload, first sync, interpreter).

Three figures, each against its yardstick in the same run, alternating:

- ``submit``: ``gpujob submit job.yaml --host cluster`` (a CLI process; the code unchanged since the
  warm-up, as for a resubmit) until the script's first line is in the job's log, against ``ssh -p PORT
  root@127.0.0.1 sbatch --parsable SCRIPT`` of the same script (same interpreter, same main.py) until
  its first line is in its ``--output`` file. Target <= 1.3x.
- ``status``: ``gpujob status JOB --host cluster --json`` of a running Slurm job on the kept connection
  (the multiplexer started by the warm-up) against ``ssh -p PORT root@127.0.0.1 squeue -j ID`` (a fresh
  ssh each time). Target <= 1.0x.
- ``requeue``: a plain torch loop (checkpoint every K steps, renamed into place) requeued with
  ``scontrol requeue`` at a random step (tests/slurm/cluster.py ``requeue``: it also lifts the ~2 min
  BeginTime hold 22.05 puts on a requeued job). Steps redone after the resume against the steps since
  the last checkpoint when it was killed (target: at most those); the same for a loop that saves on
  SIGTERM (target: 0).

    python benchmarks/slurm/bench_slurm.py [--runs 9] [--requeues 6] [--only submit,status,requeue] [--seed 45]

Needs root, Slurm (apt-get install slurmctld slurmd slurm-client), OpenSSH's sshd and torch.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

HOST = "cluster"
MARK = "gpujob-bench: first line"
FIRST = f"print({MARK!r}, flush=True)\n"
# a job that runs until it is stopped (the status figure needs a running Slurm job)
LONG = "import time\nprint('up', flush=True)\nwhile True:\n    time.sleep(0.5)\n"
# tests/slurm/test_slurm_jobs.py's loop, with a line once a checkpoint is in place; SAVE_ON_TERM=1: a
# SIGTERM makes it save after the step under way and exit (what gpujob's Trainer hook does on a stop)
TRAIN = textwrap.dedent("""
    import os, signal, time
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    steps, every = int(os.environ["STEPS"]), int(os.environ["EVERY"])
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ck, start = os.environ["GPUJOB_CKPT_DIR"], 0
    term = []
    if os.environ.get("SAVE_ON_TERM") == "1":
        signal.signal(signal.SIGTERM, lambda *a: term.append(1))
    if os.environ.get("GPUJOB_RESUME"):
        st = torch.load(os.environ["GPUJOB_RESUME"])
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start = st["step"]
    print(f"start at step {start}", flush=True)
    x = torch.randn(64, 4)
    y = x.sum(1, keepdim=True)

    def save(step):
        path = os.path.join(ck, f"step{step:04d}.pt")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, path + ".tmp")
        os.replace(path + ".tmp", path)
        print(f"saved {step}", flush=True)

    for step in range(start + 1, steps + 1):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}/{steps} loss={loss.item():.4f}", flush=True)
        if step % every == 0 or term:
            save(step)
        if term:
            raise SystemExit(0)
        time.sleep(float(os.environ["SLOW"]))
""")


def cli(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", *args], capture_output=True, text=True,
                       timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise SystemExit(f"gpujob {' '.join(args)} failed ({r.returncode}): {r.stderr[-1500:]}{r.stdout[-500:]}")
    return r


def project(base: Path, name: str, script: str, **spec: object) -> Path:
    d = base / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "main.py").write_text(script)
    (d / "job.yaml").write_text(json.dumps({"name": name, "run": "python main.py", **spec}))  # JSON is YAML
    return d / "job.yaml"


def wait(pred, timeout: float, what: str, interval: float = 0.01):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f})"


class Bench:
    def __init__(self, tmp: Path, cluster, login_port: int, user: str, shared: Path) -> None:  # type: ignore[no-untyped-def]
        from gpujob.config.keys import ensure_client_key

        self.tmp, self.c, self.port, self.user, self.shared = tmp, cluster, login_port, user, shared
        self.ssh = ["ssh", "-p", str(login_port), "-i", str(ensure_client_key()), "-o", "StrictHostKeyChecking=no",
                    "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
                    f"{user}@127.0.0.1"]

    def idle(self, timeout: float = 120) -> None:
        """No job left in Slurm's queue (the node is free for the next one)."""
        wait(lambda: not self.c.squeue_ids(), timeout, "Slurm's queue to empty", 0.1)

    def log(self, job_id: str) -> str:
        return read(self.shared / "jobs" / job_id / "output.log")

    # --- submit to running ---------------------------------------------------------------------
    def slurm_times(self, sid: str) -> tuple[float, float]:
        """(when slurmctld took job ``sid``'s sbatch, when it allocated it a node): its log's stamps."""
        got: dict[str, float] = {}

        def stamp(line: str) -> float:
            t = line[1:line.index("]")]
            return time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + t[19:])

        def seen() -> bool:
            for line in read(self.c.folder / "log" / "ctld.log").splitlines():
                if f"_slurm_rpc_submit_batch_job: JobId={sid} " in line:
                    got.setdefault("rpc", stamp(line))
                elif f"sched: Allocate JobId={sid} " in line or f"_start_job: Started JobId={sid} " in line:
                    got.setdefault("alloc", stamp(line))
            return len(got) == 2

        wait(seen, 10, f"slurmctld's log lines of job {sid}", 0.1)
        return got["rpc"], got["alloc"]

    def gpujob_submit(self, job: Path) -> dict[str, float]:
        """When the CLI exits, when the script's first line is in the job's log (s after the start), and
        when slurmctld took the sbatch and placed the job."""
        jobs = self.shared / "jobs"
        before = set(os.listdir(jobs)) if jobs.exists() else set()
        wall, t0 = time.time(), time.perf_counter()
        p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "submit", str(job), "--host", HOST, "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        ret = None
        while True:
            if ret is None and p.poll() is not None:
                ret = time.perf_counter() - t0
                if p.returncode != 0:
                    raise SystemExit(f"gpujob submit failed: {p.stderr.read()[-1500:]}")
            new = set(os.listdir(jobs)) - before if jobs.exists() else set()
            if any(MARK in read(jobs / j / "output.log") for j in new):
                first = time.perf_counter() - t0
                break
            if time.perf_counter() - t0 > 120:
                raise SystemExit("no first line from the gpujob job after 120 s")
            time.sleep(0.01)
        out, err = p.communicate(timeout=120)
        if ret is None:
            ret = time.perf_counter() - t0
            if p.returncode != 0:
                raise SystemExit(f"gpujob submit failed: {err[-1500:]}")
        res = json.loads(out)
        rpc, alloc = self.slurm_times(res["slurm_job"])
        events = [json.loads(x) for x in read(jobs / res["job_id"] / "events.jsonl").splitlines() if x.strip()]
        running = next(e["t"] for e in events if e.get("event") == "state" and e.get("state") == "running")
        return {"ret": ret, "first": first, "rpc": rpc - wall, "alloc": alloc - wall, "running": running - wall}

    def hand_sbatch(self, n: int, code: Path) -> dict[str, float]:
        """When ``ssh ... sbatch`` exits, when the first line is in its output file (s after the start), and
        when slurmctld took the sbatch and placed the job."""
        out = self.tmp / "hand" / f"out-{n}.txt"
        script = self.tmp / "hand" / f"job-{n}.sh"
        script.parent.mkdir(exist_ok=True)
        script.write_text(f"#!/bin/sh\n#SBATCH --job-name=hand-{n}\n#SBATCH --output={out}\n"
                          f"cd {code}\nexec {sys.executable} main.py\n")
        wall, t0 = time.time(), time.perf_counter()
        p = subprocess.Popen(self.ssh + [f"sbatch --parsable {script}"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        ret = None
        while True:
            if ret is None and p.poll() is not None:
                ret = time.perf_counter() - t0
                if p.returncode != 0:
                    raise SystemExit(f"sbatch failed: {p.stderr.read()}")
            if MARK in read(out):
                first = time.perf_counter() - t0
                break
            if time.perf_counter() - t0 > 120:
                raise SystemExit("no first line from the hand-made job after 120 s")
            time.sleep(0.01)
        said, _ = p.communicate(timeout=60)
        rpc, alloc = self.slurm_times(said.strip().split(";")[0])
        return {"ret": ret if ret is not None else time.perf_counter() - t0, "first": first, "rpc": rpc - wall,
                "alloc": alloc - wall}

    def submit(self, runs: int) -> None:
        job = project(self.tmp / "proj", "first", FIRST)
        code = job.parent
        self.gpujob_submit(job)  # warm: agent uploaded, code synced, interpreter found
        self.idle()
        self.hand_sbatch(0, code)
        self.idle()
        g: list[dict[str, float]] = []
        h: list[dict[str, float]] = []
        for n in range(1, runs + 1):
            for who in (("g", "h") if n % 2 else ("h", "g")):
                (g.append(self.gpujob_submit(job)) if who == "g" else h.append(self.hand_sbatch(n, code)))
                self.idle()

        def col(rows: list[dict[str, float]], f) -> list[float]:  # type: ignore[no-untyped-def]
            return [f(r) for r in rows]

        def m(xs: list[float]) -> str:
            return f"{statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"

        parts = [
            ("command returns", lambda r: r["ret"]),
            ("start to slurmctld's sbatch RPC", lambda r: r["rpc"]),
            ("Slurm's wait: RPC to the node's allocation", lambda r: r["alloc"] - r["rpc"]),
            ("allocation to the first line", lambda r: r["first"] - r["alloc"]),
            ("**first line in the log** (total)", lambda r: r["first"]),
            ("total less Slurm's wait", lambda r: r["first"] - (r["alloc"] - r["rpc"])),
        ]
        print(f"\n### submit to the first line ({runs} runs each, alternating; seconds, median (min–max))\n")
        print("| from the start of the command | `ssh ... sbatch --parsable SCRIPT` | `gpujob submit` | ratio of medians |")
        print("|---|---|---|---|")
        for name, f in parts:
            hv, gv = col(h, f), col(g, f)
            print(f"| {name} | {m(hv)} | {m(gv)} | {statistics.median(gv) / statistics.median(hv):.2f} |")
        print(f"| gpujob: allocation to its supervisor's `running` | | {m(col(g, lambda r: r['running'] - r['alloc']))} | |")
        print(f"| gpujob: `running` to the first line (`bash -lc` and python) | | "
              f"{m(col(g, lambda r: r['first'] - r['running']))} | |")
        ratios = [a["first"] / b["first"] for a, b in zip(g, h)]
        print(f"\nper-pair ratio of the totals: median {statistics.median(ratios):.2f}, min {min(ratios):.2f}, "
              f"max {max(ratios):.2f}")
        print("raw (s):", json.dumps({"gpujob": [{k: round(v, 3) for k, v in r.items()} for r in g],
                                      "hand": [{k: round(v, 3) for k, v in r.items()} for r in h]}))

    # --- status --------------------------------------------------------------------------------
    def status(self, runs: int) -> None:
        res = json.loads(cli("submit", str(project(self.tmp / "proj", "long", LONG)), "--host", HOST, "--json").stdout)
        job_id, sid = res["job_id"], res["slurm_job"]
        wait(lambda: "up" in self.log(job_id).split(), 120, "the long job to start", 0.1)
        gp = [sys.executable, "-m", "gpujob.cli", "status", job_id, "--host", HOST, "--json"]
        hand = self.ssh + [f"squeue -j {sid}"]
        nomux = dict(os.environ, GPUJOB_MUX="0")
        cases = {
            f"ssh ... squeue -j {sid} (fresh ssh; yardstick)": (hand, None),
            "gpujob status JOB --json (kept connection)": (gp, None),
            "gpujob status JOB --json (GPUJOB_MUX=0: own connection)": (gp, nomux),
            "python -c pass (for scale)": ([sys.executable, "-c", "pass"], None),
        }

        def timed(cmd: list[str], env: dict[str, str] | None) -> float:
            t0 = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=120)
            dt = time.perf_counter() - t0
            if r.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr[-800:]}")
            return dt

        timed(gp, None)  # starts the multiplexer if no command to the host did yet
        time.sleep(2)  # the multiplexer daemon listens
        for cmd, env in cases.values():
            timed(cmd, env)
        shown = json.loads(subprocess.run(gp, capture_output=True, text=True).stdout)
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(runs):
            for name, (cmd, env) in cases.items():
                times[name].append(timed(cmd, env))
        base = statistics.median(next(iter(times.values())))
        print(f"\n### status of a running Slurm job ({runs} runs each, alternating)\n")
        print(f"gpujob's answer: state {shown.get('state')}, slurm {shown.get('slurm')}\n")
        print("| command | median | min | max | x squeue over ssh |")
        print("|---|---|---|---|---|")
        for name, ts in times.items():
            m = statistics.median(ts)
            print(f"| `{name}` | {m * 1000:.0f} ms | {min(ts) * 1000:.0f} ms | {max(ts) * 1000:.0f} ms | {m / base:.2f} |")
        print("raw (s):", json.dumps({k: [round(x, 3) for x in v] for k, v in times.items()}))
        t0 = time.perf_counter()
        st = json.loads(cli("stop", job_id, "--host", HOST, "--json").stdout)
        print(f"\n`gpujob stop` of it (a script that never reads the stop file): {time.perf_counter() - t0:.2f} s, "
              f"state {st.get('state')}")
        self.idle()

    # --- work lost to a requeue ----------------------------------------------------------------
    def requeue_once(self, name: str, at: int, save_on_term: bool, steps: int, every: int,
                     slow: float) -> dict[str, object]:
        """One job requeued once its log shows step ``at``; what it did before and after."""
        job = project(self.tmp / "proj", name, TRAIN, checkpoint={"pattern": "step*.pt"},
                      env={"STEPS": str(steps), "EVERY": str(every), "SLOW": str(slow),
                           "SAVE_ON_TERM": "1" if save_on_term else "0"})
        res = json.loads(cli("submit", str(job), "--host", HOST, "--json").stdout)
        job_id, sid = res["job_id"], res["slurm_job"]
        wait(lambda: re.search(rf"^step {at}/", self.log(job_id), re.M), 120, f"step {at}", 0.005)
        wall, t0 = time.time(), time.perf_counter()
        self.c.requeue(sid)  # scontrol requeue; then, once PENDING, StartTime=now (lifts 22.05's BeginTime hold)

        def resumed() -> bool:
            parts = self.log(job_id).split("start at step")
            return len(parts) >= 3 and bool(re.search(r"^step \d+/", parts[2], re.M))

        wait(resumed, 180, "the resumed attempt's first step", 0.02)
        back = time.perf_counter() - t0
        wait(lambda: re.search(rf"^step {steps}/{steps}", self.log(job_id), re.M), 180, "the last step", 0.1)
        self.idle()
        st = json.loads(cli("status", job_id, "--host", HOST, "--json").stdout)
        events = [json.loads(x) for x in read(self.shared / "jobs" / job_id / "events.jsonl").splitlines() if x]
        running2 = next(e["t"] for e in events if e.get("event") == "state" and e.get("attempt") == 2)
        first, second = self.log(job_id).split("start at step")[1:3]
        done = max(int(x) for x in re.findall(r"^step (\d+)/", first, re.M))
        periodic = max([int(x) for x in re.findall(r"^saved (\d+)", first, re.M) if int(x) % every == 0] or [0])
        start = int(second.split()[0])
        return {"variant": "saves on SIGTERM" if save_on_term else "plain", "asked_at": at, "last_step": done,
                "last_saved": periodic, "resumed_at": start, "since_ckpt": done - periodic, "redone": done - start,
                "running_s": round(running2 - wall, 2), "back_s": round(back, 2), "state": st.get("state"),
                "requeues": st.get("requeues")}

    def requeue(self, reps: int, seed: int, steps: int = 100, every: int = 10, slow: float = 0.05) -> None:
        rng = random.Random(seed)
        rows = []
        for save_on_term in (False, True):
            for n in range(reps):
                rows.append(self.requeue_once(f"rq{n}{'t' if save_on_term else 'p'}", rng.randint(every + 1, steps - 30),
                                              save_on_term, steps, every, slow))
        print(f"\n### work lost to a requeue ({reps} per variant; {steps} steps, a checkpoint every {every}, "
              f"{slow:g} s a step; seed {seed})\n")
        print("| loop | requeue asked at step | last step done | newest periodic checkpoint then | resumed at | "
              "steps since that checkpoint | steps redone | requeue to attempt 2 `running` | requeue to its first step "
              "| end |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['variant']} | {r['asked_at']} | {r['last_step']} | {r['last_saved']} | {r['resumed_at']} | "
                  f"{r['since_ckpt']} | {r['redone']} | {r['running_s']:.2f} s | {r['back_s']:.2f} s | {r['state']}, "
                  f"{r['requeues']} requeue |")
        for variant in ("plain", "saves on SIGTERM"):
            mine = [r for r in rows if r["variant"] == variant]
            over = [r for r in mine if r["redone"] > r["since_ckpt"]]
            print(f"\n{variant}: redone {sum(r['redone'] for r in mine)} steps in all, {sum(r['since_ckpt'] for r in mine)} "
                  f"since the last periodic checkpoint; runs that redid more than that: {len(over)}; requeue to attempt 2 "
                  f"running {med([r['running_s'] for r in mine])}, to its first step {med([r['back_s'] for r in mine])}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9, help="pairs for submit and status")
    ap.add_argument("--requeues", type=int, default=6, help="requeues per loop variant")
    ap.add_argument("--only", default="submit,status,requeue")
    ap.add_argument("--seed", type=int, default=45)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its bytecode (see bench_status.py)
    os.environ.update(GPUJOB_CONFIG_DIR=str(tmp / "config"), GPUJOB_STATE_DIR=str(tmp / "state"),
                      GPUJOB_CACHE_DIR=str(tmp / "cache"), GPUJOB_LOCAL_ROOT=str(tmp / "local"),
                      GPUJOB_NO_SSH_AGENT="1", GPUJOB_CONNECT_RETRIES="1", GPUJOB_PREFLIGHT="0",
                      PYENV_REHASH_TIMEOUT="1", OMP_NUM_THREADS="1", GPUJOB_MUX_DIR=tempfile.mkdtemp(prefix="gjmux"),
                      PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.keys import public_key_line
    from tests.conftest import start_sshd, stop_sshd
    from tests.slurm.cluster import start_cluster, stop_cluster

    load0 = os.getloadavg()
    c = start_cluster(1)
    sshd = None
    try:
        sshd = start_sshd(tmp / "login-sshd", set_env={"SLURM_CONF": str(c.conf)})
        sshd.authorize(public_key_line())
        user = os.environ.get("USER", "root")
        shared = tmp / "shared"
        shared.mkdir()
        HostStore().save(Host(name=HOST, hostname="127.0.0.1", port=sshd.port, user=user, root=str(shared),
                              env={"GPUJOB_PATH_PREFIX": str(Path(sys.executable).parent)}, connect_timeout=5,
                              scheduler="slurm", partition="debug"))
        b = Bench(tmp, c, sshd.port, user, shared)
        t0 = time.perf_counter()
        warm = c.run("sbatch", "--parsable", "--wrap", "true", f"--output={tmp}/warm.out")
        if warm.returncode != 0:
            raise SystemExit(f"sbatch failed: {warm.stderr}")
        b.idle()
        print(f"cluster {c.name}: the warm-up job (sbatch --wrap true) ended {time.perf_counter() - t0:.2f} s "
              f"after its sbatch; load average before: {' '.join(f'{x:.2f}' for x in load0)}; {os.cpu_count()} CPUs")
        only = args.only.split(",")
        if "submit" in only:
            b.submit(args.runs)
        if "status" in only:
            b.status(args.runs)
        if "requeue" in only:
            b.requeue(args.requeues, args.seed)
        print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        from gpujob.transport import mux

        for sock in (mux.mux_dir() or tmp).glob("*.sock"):
            try:
                mux._request(sock, {"op": "exit"}, timeout=5).close()
            except OSError:
                pass
        if sshd is not None:
            stop_sshd(sshd)
        stop_cluster(c, keep_logs=tmp / "slurm-logs")
        print(f"(files and the cluster's logs kept in {tmp})")


if __name__ == "__main__":
    main()
