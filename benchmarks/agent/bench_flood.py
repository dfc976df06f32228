"""The supervisor under a log flood (issue 35): its CPU while its job prints LINES lines a second.

    python benchmarks/agent/bench_flood.py [--seconds 30] [--lines 20000] [--kind mixed|plain|wide] [--pause]

A real job on the ``local`` host (a temporary root and config) prints ``--lines`` lines a second,
paced by the clock in 50 ms batches: ``mixed`` cycles the segments of the real captured logs in
``tests/remote/metrics/data/logs`` (HF Trainer dicts and bar redraws, Lightning's tqdm and rich bars, a tqdm
loop with prints), ``plain`` prints ``step N loss X lr Y`` lines, ``wide`` a line of nine fields
(``epoch 3 | step N | train loss X | val loss ... | tokens/s ... | mem ...``) each. Once the job runs, the supervisor's
CPU (utime+stime of every thread, ``/proc/<pid>/stat``) is read ``--seconds`` apart, and the lines
the log gained meanwhile are counted (what was really printed, not what was asked).

The yardstick, measured in the same run right after (the job stopped): the same printer for the
same time into ``cat > FILE``; ``cat``'s CPU (from ``wait4``) is the cost of merely moving the
stream into a file. The printer's own CPU is reported beside it (a job that prints this much pays
that itself). ``--pause`` prints the supervisor's pid and waits for Enter before measuring (to attach
a profiler: ``py-spy record -p PID``). The collector reads at most 4 MiB a tick: one that falls behind
spends its CPU on fewer lines than were printed, so the figure judged is
``supervisor_pct_for_every_line_printed`` (its share scaled by printed / read). Prints one JSON
document; exits 1 when that is more than ``--limit`` (35 %) of one core.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PRINTER = r'''
import itertools, os, sys, time
rate, seconds, kind = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
out = sys.stdout.buffer
if kind == "plain":
    segs = [b"step %d loss %.4f lr 3.0e-04\n" % (i, 2.0 / (1 + i / 1000.0)) for i in range(20000)]
elif kind == "wide":
    segs = [b"epoch 3 | step %d | train loss %.4f | val loss 0.5120 | acc 0.91 | lr 1.0e-04 | grad_norm 1.2 | "
            b"tokens/s 40000 | mem 12.3GB\n" % (i, 2.0 / (1 + i / 1000.0)) for i in range(20000)]
else:
    segs = [s for s in open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "segments.bin"), "rb")
            .read().split(b"\0") if s]
it = itertools.cycle(segs)
batch = max(1, rate // 20)
start = time.monotonic()
n = 0
while time.monotonic() - start < seconds:
    out.write(b"".join(next(it) for _ in range(batch)))
    out.flush()
    n += batch
    ahead = n / rate - (time.monotonic() - start)
    if ahead > 0:
        time.sleep(ahead)
'''


def segments() -> list[bytes]:
    """Every ``\\n``/``\\r``-terminated piece of the captured logs, terminator kept (bench_metrics' own)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_metrics import segments as captured

    return captured()


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(utime, stime) of every thread of ``pid``, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tck, int(fields[12]) / tck


def read_offset(jd: Path) -> int:
    """How far into output.log the supervisor's metrics collector has read."""
    try:
        return int(json.loads((jd / "metrics.state.json").read_text()).get("log_offset") or 0)
    except (OSError, ValueError):
        return 0


def lines_between(path: Path, a: int, b: int) -> int:
    with open(path, "rb") as f:
        f.seek(a)
        data = f.read(b - a)
    return data.count(b"\n") + data.count(b"\r")


def yardstick(printer: Path, rate: int, seconds: float, kind: str, tmp: Path) -> tuple[float, float, int]:
    """(cat's CPU s, the printer's CPU s, lines): the same stream for the same time into ``cat > FILE``."""
    sink = tmp / "cat.out"
    with open(sink, "wb") as out:
        cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=out)
        pr = subprocess.Popen([sys.executable, str(printer), str(rate), str(seconds), kind], stdout=cat.stdin)
        assert cat.stdin is not None
        cat.stdin.close()
        _, _, ru_p = os.wait4(pr.pid, 0)
        _, _, ru_c = os.wait4(cat.pid, 0)
    pr.returncode = cat.returncode = 0
    data = sink.read_bytes()
    return ru_c.ru_utime + ru_c.ru_stime, ru_p.ru_utime + ru_p.ru_stime, data.count(b"\n") + data.count(b"\r")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--lines", type=int, default=20000, help="lines a second the job prints")
    ap.add_argument("--kind", choices=("mixed", "plain", "wide"), default="mixed")
    ap.add_argument("--limit", type=float, default=35.0, help="percent of one core the supervisor may take")
    ap.add_argument("--pause", action="store_true", help="print the supervisor's pid, wait for Enter")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpujob-flood-"))
    env = dict(os.environ, GPUJOB_CONFIG_DIR=str(tmp / "cfg"), GPUJOB_LOCAL_ROOT=str(tmp / "root"),
               GPUJOB_STATE_DIR=str(tmp / "state"), GPUJOB_CACHE_DIR=str(tmp / "cache"), PYTHONPATH=str(REPO))
    env.pop("GPUJOB_HEARTBEAT", None)  # the defaults a job gets
    proj = tmp / "proj"
    proj.mkdir()
    (proj / "segments.bin").write_bytes(b"\0".join(segments()))
    printer = proj / "printer.py"
    printer.write_text(PRINTER)
    run_s = a.seconds + 60  # it is stopped once measured
    (proj / "job.yaml").write_text(json.dumps({"name": "flood", "run": f"python printer.py {a.lines} {run_s} {a.kind}"}))
    # cwd: ``-m`` puts the current folder first on sys.path, before PYTHONPATH (another checkout's code)
    res = json.loads(subprocess.run([sys.executable, "-m", "gpujob.cli", "submit", str(proj / "job.yaml"), "--json"],
                                    env=env, check=True, capture_output=True, text=True, cwd=str(REPO)).stdout)
    job_id, pid = res["job_id"], res["supervisor_pid"]
    jd = tmp / "root" / "jobs" / job_id
    while json.loads((jd / "status.json").read_text()).get("state") != "running":
        time.sleep(0.2)
    time.sleep(3)  # past the attempt's start
    if a.pause:
        print(f"supervisor pid {pid}; Enter to measure", file=sys.stderr)
        sys.stdin.readline()
    (u0, k0), t0, b0, r0 = cpu_seconds(pid), time.monotonic(), (jd / "output.log").stat().st_size, read_offset(jd)
    time.sleep(a.seconds)
    (u1, k1), t1, b1, r1 = cpu_seconds(pid), time.monotonic(), (jd / "output.log").stat().st_size, read_offset(jd)
    s0, s1 = u0 + k0, u1 + k1
    load = os.getloadavg()[0]
    subprocess.run([sys.executable, "-m", "gpujob.cli", "stop", job_id, "--json"], env=env, capture_output=True,
                   cwd=str(REPO))
    wall = t1 - t0
    lines = lines_between(jd / "output.log", b0, b1)
    read = lines_between(jd / "output.log", r0, r1) if r1 > r0 else 0
    if not lines:
        print((jd / "output.log").read_text()[-2000:], file=sys.stderr)
    cat_cpu, printer_cpu, cat_lines = yardstick(printer, a.lines, a.seconds, a.kind, tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    share = 100 * (s1 - s0) / wall
    # what keeping up would cost: a collector that fell behind spent its CPU on fewer lines than were printed
    per_flood = share * lines / read if read else float("inf")
    print(json.dumps({
        "kind": a.kind, "seconds": round(wall, 1), "lines_per_s_asked": a.lines,
        "lines_per_s_printed": round(lines / wall), "bytes_per_s": round((b1 - b0) / wall),
        "lines_per_s_read_by_supervisor": round(read / wall),
        "supervisor_behind_bytes": b1 - r1,
        "supervisor_cpu_s": round(s1 - s0, 3), "supervisor_user_s": round(u1 - u0, 3), "supervisor_system_s": round(k1 - k0, 3),
        "supervisor_pct_of_one_core": round(share, 1),
        "supervisor_pct_for_every_line_printed": round(per_flood, 1),
        "yardstick_cat_cpu_s": round(cat_cpu, 3), "yardstick_cat_pct_of_one_core": round(100 * cat_cpu / a.seconds, 2),
        "yardstick_lines_per_s": round(cat_lines / a.seconds),
        "printer_pct_of_one_core": round(100 * printer_cpu / a.seconds, 1),
        "supervisor_over_cat": round((s1 - s0) / cat_cpu, 1) if cat_cpu else None,
        "load_average_1m": round(load, 1), "cores": os.cpu_count(),
    }, indent=1))
    return 0 if per_flood <= a.limit else 1


if __name__ == "__main__":
    sys.exit(main())
