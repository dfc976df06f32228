"""What reading metrics from the log and TensorBoard costs the supervisor (issue 13: < 1 % of a core).

Simulates SECONDS of a job that prints LINES lines a second (segments cut from the real captured
logs in tests/remote/metrics/data/logs: HF Trainer dicts and bar redraws, Lightning and tqdm bars, prints)
and writes SCALARS TensorBoard scalars a second (torch's SummaryWriter), and runs the supervisor's
``Collector`` on them every 2 s as the supervisor does. Measured with ``time.process_time`` in
the same process, against a yardstick in the same run: reading the same bytes in the same
pieces (open, seek, read) without parsing them.

    python benchmarks/agent/bench_metrics.py [--seconds 60] [--lines 1000] [--scalars 20]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from remote.core.layout import JobDir  # noqa: E402
from remote.metrics import metricsrc  # noqa: E402


def segments() -> list[bytes]:
    """Every ``\\n``/``\\r``-terminated piece of the captured logs, terminator kept."""
    out = []
    for f in sorted((REPO / "tests" / "remote" / "metrics" / "data" / "logs").glob("*.log")):
        data = f.read_bytes()
        start = 0
        for i, b in enumerate(data):
            if b in (10, 13):
                if i > start:
                    out.append(data[start:i + 1])
                start = i + 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--scalars", type=int, default=20)
    ap.add_argument("--every", type=float, default=2.0, help="seconds between two collects (the supervisor's)")
    args = ap.parse_args()

    from torch.utils.tensorboard import SummaryWriter

    segs = itertools.cycle(segments())
    with tempfile.TemporaryDirectory() as tmp:
        job = JobDir(Path(tmp) / "jobs" / "bench-1")
        (job.path / "code").mkdir(parents=True)
        job.log.write_bytes(b"")
        job.spec.write_text(json.dumps({"name": "bench", "run": "python train.py"}))
        writer = SummaryWriter(str(job.path / "tb"))
        col = metricsrc.Collector(job, job.spec_data(), time.time() - 5)
        read_cpu, read_offset = 0.0, 0
        tb_state: dict = {}
        total_bytes = 0
        step = 0
        per_collect = int(args.every)
        for sec in range(args.seconds):
            chunk = b"".join(next(segs) for _ in range(args.lines))
            with open(job.log, "ab") as f:
                f.write(chunk)
            total_bytes += len(chunk)
            for _ in range(args.scalars):
                step += 1
                writer.add_scalar("train/loss", 1.0 / step, step)
            writer.flush()
            if (sec + 1) % per_collect:
                continue
            c0 = time.process_time()  # the yardstick: the same new bytes read, nothing parsed
            with open(job.log, "rb") as f:
                f.seek(read_offset)
                read_offset += len(f.read(metricsrc.READ_CHUNK))
            for p in (job.path / "tb").glob("events*"):
                with open(p, "rb") as f:
                    f.seek(tb_state.get(p, 0))
                    tb_state[p] = tb_state.get(p, 0) + len(f.read())
            read_cpu += time.process_time() - c0
            col.collect()
        writer.close()
        log_recs = sum(1 for _ in open(job.path / "metrics.log.jsonl"))
        tb_recs = sum(1 for _ in open(job.path / "metrics.tb.jsonl"))
    share = col.cpu / args.seconds * 100
    print(json.dumps({
        "simulated_s": args.seconds, "lines_per_s": args.lines, "scalars_per_s": args.scalars,
        "log_bytes": total_bytes, "log_records": log_recs, "tb_records": tb_recs,
        "collect_cpu_s": round(col.cpu, 4), "read_only_cpu_s": round(read_cpu, 4),
        "share_of_one_core_pct": round(share, 3), "collect_over_read": round(col.cpu / read_cpu, 1) if read_cpu else None,
        "us_per_line": round(col.cpu / (args.seconds * args.lines) * 1e6, 2),
    }, indent=1))
    return 0 if share < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
