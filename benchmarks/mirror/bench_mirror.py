"""checkpoint.mirror: its cost to training, and its upload speed against rclone by hand.

    python benchmarks/mirror/bench_mirror.py steps [--steps 200 --every 50 --mb 64 --bwlimit 40M --pairs 8]
    python benchmarks/mirror/bench_mirror.py upload [--mb 256 --files 4 --runs 3]

``steps``: a template-like CPU torch job (an MLP, a checkpoint of model + optimizer + a weights
file of ``--mb`` MiB every ``--every`` steps) is submitted to the ``local`` host with and without
``checkpoint.mirror`` (an ``rclone serve s3`` on 127.0.0.1, ``bwlimit``) in ``--pairs`` back-to-back
pairs, which of the two goes first alternating; the job times its own steps (save steps included),
wall and CPU. The noise of a shared machine moves both runs of a pair alike, so the figure is the
median over pairs of (median step on) / (median step off), with the spread of those ratios.

``upload``: the same checkpoint folder (``--files`` × ``--mb``/``--files`` MiB of random bytes) to
the same S3 server, in alternating order, (a) ``rclone copy SRC DST`` by hand, (b) the mirror's path (remote/mirror:
nice/ionice, ``copy --checksum`` whose per-file hash checks count, ``check`` only for a file they
missed, the marker): MB/s of each, median of ``--runs``, and
(b)/(a). Prints one JSON line per mode.
"""

import argparse
import json
import os
import resource
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

JOB = r'''
import json, os, time, torch
torch.manual_seed(0); torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(64, 512)
ck, every, mb = os.environ["GPUJOB_CKPT_DIR"], int(os.environ["EVERY"]), int(os.environ["MB"])
times, cpu = [], []
for step in range(1, int(os.environ["STEPS"]) + 1):
    t, c = time.perf_counter(), time.process_time()
    loss = model(x).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
    if step % every == 0:  # an HF-style checkpoint, trainer_state.json last
        d = os.path.join(ck, "checkpoint-%d" % step); os.makedirs(d, exist_ok=True)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, os.path.join(d, "state.pt"))
        with open(os.path.join(d, "weights.bin"), "wb") as f:
            f.write(os.urandom(mb << 20))
        open(os.path.join(d, "rng_state.pth"), "wb").write(b"r")
        json.dump({"global_step": step}, open(os.path.join(d, "trainer_state.json"), "w"))
    times.append(time.perf_counter() - t); cpu.append(time.process_time() - c)
json.dump({"wall": times, "cpu": cpu}, open(os.path.join(os.environ["GPUJOB_JOB_DIR"], "step_times.json"), "w"))
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``rclone serve s3`` over a temp folder (keys random, in its environment only)."""

    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "s3"
        (self.root / "bench").mkdir(parents=True)
        self.key, self.secret, port = "BK" + secrets.token_hex(6), secrets.token_hex(16), free_port()
        self.url = f"http://127.0.0.1:{port}"
        # the store stands in for another machine: at nice 19, its CPU takes the least from the job's
        self.proc = subprocess.Popen(["nice", "-n", "19", "rclone", "serve", "s3", "--addr", f"127.0.0.1:{port}", str(self.root)],
                                     env=dict(os.environ, RCLONE_AUTH_KEY=f'"{self.key},{self.secret}"'),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("rclone serve s3 did not start")

    def env(self) -> dict:
        return {"AWS_ACCESS_KEY_ID": self.key, "AWS_SECRET_ACCESS_KEY": self.secret}

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def gpujob(env: dict, *args: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", *args, "--json"], env=env, capture_output=True,
                       text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    return json.loads(r.stdout)


def steps(a: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="gpujob-mirror-bench-"))
    server = Server(tmp)
    env = dict(os.environ, GPUJOB_CONFIG_DIR=str(tmp / "cfg"), GPUJOB_STATE_DIR=str(tmp / "state"),
               GPUJOB_LOCAL_ROOT=str(tmp / "root"), PYTHONPATH=str(REPO), **server.env())
    (tmp / "job").mkdir()
    (tmp / "job" / "main.py").write_text(JOB)
    ratios = {"wall": [], "cpu": []}  # type: dict
    try:
        for pair in range(a.pairs):
            got = {}
            for mode in (("off", "on") if pair % 2 == 0 else ("on", "off")):
                got[mode] = run_job(env, tmp, server, mode, a)
                print(json.dumps({"pair": pair, "mode": mode, "median_step_ms": round(1000 * got[mode]["wall"], 3),
                                  "median_cpu_ms": round(1000 * got[mode]["cpu"], 3)}), flush=True)
            for k in ratios:
                ratios[k].append(got["on"][k] / got["off"][k])
    finally:
        server.close()  # each job was waited for to its end (and its mirror's): nothing is left running
    out = {"mode": "steps", "pairs": a.pairs}
    for k, r in ratios.items():
        q = statistics.quantiles(r, n=4) if len(r) > 1 else [r[0]] * 3
        out[k + "_ratio_median"] = round(statistics.median(r), 4)
        out[k + "_ratio_iqr"] = [round(q[0], 4), round(q[2], 4)]
        out[k + "_ratios"] = [round(x, 3) for x in r]
    print(json.dumps(out))
    shutil.rmtree(tmp, ignore_errors=True)


def run_job(env: dict, tmp: Path, server: Server, mode: str, a: argparse.Namespace) -> dict:
    """One job to its end (and its mirror's): the median wall and CPU seconds of its steps."""
    spec = {"name": f"bench-{mode}", "run": "python main.py",
            "env": {"STEPS": str(a.steps), "EVERY": str(a.every), "MB": str(a.mb)}, "checkpoint": {"keep": 2}}
    if mode == "on":
        spec["secrets"] = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
        spec["checkpoint"]["mirror"] = {"to": "s3://bench/ck", "endpoint": server.url, "bwlimit": a.bwlimit}
    (tmp / "job" / "job.yaml").write_text(json.dumps(spec))
    job_id = gpujob(env, "submit", str(tmp / "job" / "job.yaml"), "--host", "local")["job_id"]
    times_file = tmp / "root" / "jobs" / job_id / "step_times.json"
    while not times_file.exists():
        time.sleep(0.5)
    time.sleep(0.5)
    times = json.loads(times_file.read_text())
    while gpujob(env, "status", job_id, "--host", "local").get("state") not in ("succeeded", "failed"):
        time.sleep(1)
    if mode == "on":  # the next run starts with the mirror idle
        events = tmp / "root" / "jobs" / job_id / "events.jsonl"
        while "mirror_done" not in events.read_text() and "mirror_wait_timeout" not in events.read_text():
            time.sleep(0.5)
    return {k: statistics.median(v) for k, v in times.items()}


def upload(a: argparse.Namespace) -> None:
    from remote.mirror import engine, store

    tmp = Path(tempfile.mkdtemp(prefix="gpujob-mirror-up-"))
    server = Server(tmp)
    src = tmp / "checkpoint-1"
    src.mkdir()
    for i in range(a.files):
        with open(src / f"shard-{i}.bin", "wb") as f:
            f.write(os.urandom((a.mb << 20) // a.files))
    size = sum(p.stat().st_size for p in src.iterdir())
    cfg = {"targets": ["s3://bench/up"], "endpoint": server.url}
    env = engine.env_for("s3://bench/up", cfg, server.env(), dict(os.environ))
    rclone = shutil.which("rclone")
    rates = {"by_hand": [], "mirror": [], "mirror_copy": []}
    rechecked = 0  # runs where a file was not vouched for by the copy, so ``check`` read all again
    cpu = {"by_hand": [], "mirror": []}  # core-seconds the rclone children used, per GB
    try:
        for run in range(a.runs):
            for mode in (("by_hand", "mirror") if run % 2 == 0 else ("mirror", "by_hand")):  # neither always second
                dest = engine.dest("s3://bench/up", f"{mode}-{run}")
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                if mode == "by_hand":
                    subprocess.run([rclone, "copy", str(src), dest + "/checkpoint-1"], env=env, check=True)
                else:
                    rc = engine.Rclone(rclone, env, nice=not a.no_nice)
                    verified = rc.copy(str(src), dest + "/checkpoint-1", False, lambda s: None)
                    rates["mirror_copy"].append(size / (time.perf_counter() - t) / 1e6)
                    rechecked += rc.verify(str(src), dest + "/checkpoint-1", False, verified,
                                           engine.local_files(str(src), False))
                    store.write_marker(rc, dest, {"name": "checkpoint-1", "step": 1})
                dt = time.perf_counter() - t
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                cpu[mode].append(used / (size / 1e9))
                rates[mode].append(size / dt / 1e6)
                print(json.dumps({"run": run, "mode": mode, "MB_s": round(rates[mode][-1], 1)}), file=sys.stderr)
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    hand, ours = statistics.median(rates["by_hand"]), statistics.median(rates["mirror"])
    copy = statistics.median(rates["mirror_copy"])
    print(json.dumps({"mode": "upload", "MB": round(size / 1e6), "by_hand_MB_s": round(hand, 1),
                      "mirror_copy_MB_s": round(copy, 1), "copy_ratio": round(copy / hand, 3),
                      "mirror_verified_MB_s": round(ours, 1), "verified_ratio": round(ours / hand, 3),
                      "ratios": [round(m / h, 3) for m, h in zip(rates["mirror"], rates["by_hand"])],
                      "runs_rechecked": rechecked,
                      "cpu_s_per_GB_by_hand": round(statistics.median(cpu["by_hand"]), 2),
                      "cpu_s_per_GB_mirror": round(statistics.median(cpu["mirror"]), 2)}))


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("steps")
    s.add_argument("--steps", type=int, default=200)
    s.add_argument("--every", type=int, default=50)
    s.add_argument("--mb", type=int, default=64)
    s.add_argument("--bwlimit", default="40M")
    s.add_argument("--pairs", type=int, default=8)
    u = sub.add_parser("upload")
    u.add_argument("--mb", type=int, default=256)
    u.add_argument("--files", type=int, default=4)
    u.add_argument("--runs", type=int, default=5)
    u.add_argument("--no-nice", action="store_true", help="the mirror's rclone at normal priority")
    a = ap.parse_args()
    steps(a) if a.what == "steps" else upload(a)


if __name__ == "__main__":
    main()
