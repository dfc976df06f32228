"""The agent's own start on the instance: what one first-command verb costs there, against ``cat``.

A first ``gpujob status JOB --json`` (no kept connection) runs the agent's ``status`` verb as a
fresh ``python -S -m remote ...`` on the instance; ``ls``, ``tail`` and the install probe run
``status``, ``logs`` and ``hello`` the same way. This times each such verb exactly as the client
sends it (``Agent.command``: ``/bin/sh -c`` with the agent's own command line, the agent installed
as the client installs it, bytecode included) against ``cat <root>/jobs/<id>/status.json`` and a
bare ``python -S -c pass``, in one run, alternating, each a fresh process; no SSH (the login is
the same for every case, and bench_status.py times it). The jobs are real ``local``-host jobs:
one running (2,000 metric lines and 5 checkpoints at its start, then a line a second), five finished.

It also gives the CPU of one ``status`` answered by the kept agent (``serve``, the
multiplexer's: ``main`` per request, in one process). ``--counts`` adds what does not move with the machine's load: modules imported (``-X
importtime``), instructions (``valgrind --tool=callgrind``, where installed) and the file calls
(``strace -f``: stats, opens, reads).  ``--against DIR`` times a second checkout's agent (e.g. a
``git archive`` of the base) in the same rounds, so before and after share the load.

    python benchmarks/cli/agent_start.py [--runs 11] [--counts] [--against /tmp/base]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# the running job reaches its steady state at once and stays there, so that each checkout's job (started
# a minute apart) costs a status the same: 2,000 metric lines (more than the 64 KiB that the cost
# estimate reads), 5 checkpoints, then a line a second
RUNNING = ("import os, time\n"
           "ck = os.environ['GPUJOB_CKPT_DIR']\n"
           "for i in range(2000):\n"
           "    print('step', i, 'loss', round(1.0 / (i + 1), 6))\n"
           "for k in range(1, 6):\n"
           "    os.makedirs(os.path.join(ck, 'checkpoint-%d' % (400 * k)))\n"
           "    open(os.path.join(ck, 'checkpoint-%d' % (400 * k), 'model.pt'), 'wb').write(os.urandom(4096))\n"
           "print('ready', flush=True)\n"
           "for i in range(2000, 100000):\n"
           "    time.sleep(1)\n"
           "    print('step', i, 'loss', round(1.0 / (i + 1), 6), flush=True)\n")
FINISHED = "import sys\nfor i in range(300):\n    print('step', i, 'loss', round(1.0 / (i + 1), 6))\n"
FILE_CALLS = {"stat": re.compile(r"^(newfstatat|fstat|stat|lstat|statx)$"), "open": re.compile(r"^openat?$"),
              "read": re.compile(r"^(read|pread64)$"), "readdir": re.compile(r"^getdents64$")}


def cli(repo: Path, *args: str, env: dict[str, str]) -> Any:
    # cwd: a ``-m``/``-c`` process puts its working folder first on sys.path, before PYTHONPATH
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", *args, "--json"], env=dict(env, PYTHONPATH=str(repo)),
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=str(repo))
    if r.returncode != 0:
        raise SystemExit(f"gpujob {' '.join(args)} failed: {r.stderr[-800:]}")
    return json.loads(r.stdout)


def state(root: Path, job: str) -> dict[str, Any]:
    try:
        return json.loads((root / "jobs" / job / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def wait_for(what: str, ok: Any, limit: float = 120.0) -> None:
    end = time.monotonic() + limit
    while not ok():
        if time.monotonic() > end:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.2)


class Checkout:
    """One checkout's agent, installed under its own root, with its jobs."""

    def __init__(self, name: str, repo: Path, tmp: Path) -> None:
        self.name, self.repo, self.tmp = name, repo, tmp
        self.root = tmp / name / "local"
        self.env = dict(os.environ, GPUJOB_CONFIG_DIR=str(tmp / name / "config"), GPUJOB_LOCAL_ROOT=str(self.root))
        self.running = ""
        self.cases: dict[str, str] = {}

    def start(self) -> None:
        """Submit the jobs, wait for them to be where the bench wants them, build the command lines."""
        repo, name, tmp = self.repo, self.name, self.tmp
        proj = tmp / name / "proj"
        proj.mkdir(parents=True)
        for fname, code in (("running.py", RUNNING), ("finished.py", FINISHED)):
            (proj / fname).write_text(code)
        ids = []
        for kind in ("finished",) * 5 + ("running",):
            (proj / f"{kind}.yaml").write_text(json.dumps({"name": kind, "run": f"{sys.executable} -u {kind}.py"}))
            ids.append(cli(repo, "submit", str(proj / f"{kind}.yaml"), "--host", "local", env=self.env)["job_id"])
        self.finished, self.running = ids[0], ids[-1]
        for j in ids[:-1]:
            wait_for(f"{j} to finish", lambda j=j: state(self.root, j).get("state") == "succeeded")
        jd = self.root / "jobs" / self.running
        wait_for("the running job's checkpoints", lambda: len(list((jd / "ckpt").glob("*/model.pt"))) == 5)
        wait_for("the running job's metrics", lambda: (jd / "metrics.log.jsonl").exists()
                 and (jd / "metrics.log.jsonl").stat().st_size > 65536)
        jobs = [["--job", self.running], ["--job", self.finished], [], ["--job", self.running, "--lines", "10"], []]
        probe = ("import json, sys; from gpujob.config.hosts import local_host; from gpujob.transport.agent import Agent; "
                 "from gpujob.transport import connect; a = Agent(connect(local_host())); a.install(); "
                 "print(json.dumps([a.command(v, x) for v, x in json.loads(sys.argv[1])]))")
        verbs = list(zip(["status", "status", "status", "logs", "hello"], jobs))
        cmds = json.loads(subprocess.run([sys.executable, "-c", probe, json.dumps(verbs)], env=dict(self.env, PYTHONPATH=str(repo)),
                                         capture_output=True, text=True, check=True, timeout=120, cwd=str(repo)).stdout)
        self.cases = dict(zip(["status --job RUNNING (first `gpujob status`)", "status --job FINISHED",
                               "status (first `gpujob ls`)", "logs --job RUNNING --lines 10 (first `gpujob tail`)",
                               "hello"], cmds))

    def stop(self) -> None:
        if not self.running:
            return
        try:
            cli(self.repo, "stop", self.running, "--host", "local", env=self.env)
        except SystemExit as e:
            print(e, file=sys.stderr)


def run_once(cmd: str) -> tuple[float, float]:
    """Wall seconds and CPU seconds (the shell and everything it ran) of ``sh -c cmd``."""
    t0 = time.perf_counter()
    p = subprocess.Popen(["/bin/sh", "-c", cmd], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{cmd} failed (exit {p.returncode}): {p.stderr.read().decode()[-800:] if p.stderr else ''}")
    return dt, ru.ru_utime + ru.ru_stime


def counts(cmd: str) -> dict[str, Any]:
    """Modules imported, instructions, and file calls of one run (none of them moves with load)."""
    out: dict[str, Any] = {}
    if "-m remote" in cmd:
        r = subprocess.run(["/bin/sh", "-c", cmd.replace(" -S -m remote", " -S -X importtime -m remote")],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
        out["modules"] = sum(1 for line in r.stderr.splitlines() if line.startswith("import time:")) - 1
    if shutil.which("valgrind"):
        r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--trace-children=yes",
                            "/bin/sh", "-c", cmd], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        refs = [int(m.replace(",", "")) for m in re.findall(r"refs:\s+([\d,]+)", r.stderr)]
        out["instructions"] = sum(refs)
    if shutil.which("strace"):
        with tempfile.NamedTemporaryFile("r", suffix=".strace") as f:
            subprocess.run(["strace", "-f", "-c", "-o", f.name, "/bin/sh", "-c", cmd], capture_output=True,
                           stdin=subprocess.DEVNULL)
            for line in f.read().splitlines():
                cells = line.split()
                if len(cells) >= 5 and cells[3].isdigit():
                    for kind, pat in FILE_CALLS.items():
                        if pat.match(cells[-1]):
                            out[kind] = out.get(kind, 0) + int(cells[3])
    return out


SERVED = """
import io, statistics, sys, time
import remote.__main__ as m
def one():
    real, sys.stdout = sys.stdout, io.StringIO()
    try:
        t = time.process_time()
        m.main(sys.argv[1:])
        return time.process_time() - t
    finally:
        sys.stdout = real
one()
print(statistics.median([one() for _ in range(int(RUNS))]))
"""


def served_cpu(c: Checkout, runs: int) -> float:
    """CPU seconds of one ``status --job RUNNING`` answered by a kept agent (``serve`` calls ``main`` per
    request in its process: no start, no imports), the median over ``runs`` requests."""
    agent = next((c.root / "agent").iterdir())
    py = (agent / "python").read_text().strip()
    r = subprocess.run([py, "-S", "-c", SERVED.replace("RUNS", str(max(runs, 9) * 4)), "--root", str(c.root), "status",
                        "--job", c.running], cwd=str(agent), env=dict(os.environ, PYTHONPATH=str(agent)),
                       capture_output=True, text=True, check=True, timeout=300)
    return float(r.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--counts", action="store_true", help="modules, instructions, file calls (load-proof)")
    ap.add_argument("--against", type=Path, help="another checkout's agent, timed in the same rounds (e.g. the base)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-agent-"))
    outs = [Checkout("this", REPO, tmp)] + ([Checkout("against", args.against.resolve(), tmp)] if args.against else [])
    try:
        for c in outs:
            c.start()
        this = outs[0]
        py = f'for A in {this.root}/agent/*/; do read -r PY < "$A/python"; done; exec "$PY" -S'
        yard = {"cat <root>/jobs/RUNNING/status.json (the yardstick)": f"cat {this.root}/jobs/{this.running}/status.json",
                "python -S -c pass (the interpreter alone)": f"{py} -c pass"}
        cases: dict[str, str] = dict(yard)
        for c in outs:
            for name, cmd in c.cases.items():
                cases[f"{name} [{c.name}]" if args.against else name] = cmd
        for cmd in cases.values():  # warm the page cache (and check each runs)
            run_once(cmd)
        wall: dict[str, list[float]] = {k: [] for k in cases}
        cpu: dict[str, list[float]] = {k: [] for k in cases}
        load0 = os.getloadavg()[0]
        for i in range(args.runs):
            order = list(cases) if i % 2 == 0 else list(reversed(cases))
            for k in order:
                w, c = run_once(cases[k])
                wall[k].append(w)
                cpu[k].append(c)
        load1 = os.getloadavg()[0]
        cat = statistics.median(wall[next(iter(yard))])
        print("\n" + "; ".join(f"{c.name}: {c.repo} (agent {next((c.root / 'agent').iterdir()).name})" for c in outs))
        print(f"\n{args.runs} alternating runs each, {os.cpu_count()} CPUs, load {load0:.1f} -> {load1:.1f}; "
              f"{subprocess.run(['/bin/sh', '-c', py + ' -V'], capture_output=True, text=True).stdout.strip()}\n")
        head = "| on the instance | median | min | × cat | CPU ms (median) |"
        extra = ["modules", "instructions", "stat", "open", "read", "readdir"] if args.counts else []
        print(head + "".join(f" {e} |" for e in extra))
        print("|---|---:|---:|---:|---:|" + "---:|" * len(extra))
        for k, cmd in cases.items():
            row = (f"| {k} | {statistics.median(wall[k]) * 1000:.1f} ms | {min(wall[k]) * 1000:.1f} ms | "
                   f"{statistics.median(wall[k]) / cat:.1f} | {statistics.median(cpu[k]) * 1000:.1f} |")
            if extra:
                n = counts(cmd)
                row += "".join(f" {n.get(e, '')} |" if e != "instructions" or e not in n else f" {n[e] / 1e6:.1f} M |"
                               for e in extra)
            print(row)
        for c in outs:
            print(f"\nkept agent (`serve`), one `status --job RUNNING` request{f' [{c.name}]' if args.against else ''}: "
                  f"{served_cpu(c, args.runs) * 1000:.1f} ms CPU (median)")
    finally:
        for c in outs:
            c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
