"""checkpoint.mirror: its cost to training, and its upload speed against rclone by hand.

    python benchmarks/mirror/bench_mirror.py steps [--steps 400 --every 50 --mb 64 --bwlimit 40M --runs 2]
    python benchmarks/mirror/bench_mirror.py upload [--mb 256 --files 4 --runs 3]

``steps``: a template-like CPU torch job (an MLP, a checkpoint of model + optimizer + a weights
file of ``--mb`` MiB every ``--every`` steps) is submitted to the ``local`` host with and without
``checkpoint.mirror`` (an ``rclone serve s3`` on 127.0.0.1, ``bwlimit``), runs alternating; the job
times its own steps (save steps included). Prints the median step time of each and the ratio.

``upload``: the same checkpoint folder (``--files`` × ``--mb``/``--files`` MiB of random bytes) to
the same S3 server, (a) ``rclone copy SRC DST`` by hand, (b) the mirror's path (remote/mirror:
nice/ionice, ``copy --checksum``, ``check``, the marker): MB/s of each, median of ``--runs``, and
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
times = []
for step in range(1, int(os.environ["STEPS"]) + 1):
    t = time.perf_counter()
    loss = model(x).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
    if step % every == 0:  # an HF-style checkpoint, trainer_state.json last
        d = os.path.join(ck, "checkpoint-%d" % step); os.makedirs(d, exist_ok=True)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, os.path.join(d, "state.pt"))
        with open(os.path.join(d, "weights.bin"), "wb") as f:
            f.write(os.urandom(mb << 20))
        open(os.path.join(d, "rng_state.pth"), "wb").write(b"r")
        json.dump({"global_step": step}, open(os.path.join(d, "trainer_state.json"), "w"))
    times.append(time.perf_counter() - t)
json.dump(times, open(os.path.join(os.environ["GPUJOB_JOB_DIR"], "step_times.json"), "w"))
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
        self.proc = subprocess.Popen(["rclone", "serve", "s3", "--addr", f"127.0.0.1:{port}", str(self.root)],
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
    med = {"off": [], "on": []}
    try:
        for run in range(a.runs):
            for mode in ("off", "on"):
                spec = {"name": f"bench-{mode}", "run": "python main.py",
                        "env": {"STEPS": str(a.steps), "EVERY": str(a.every), "MB": str(a.mb)},
                        "checkpoint": {"keep": 2}}
                if mode == "on":
                    spec["secrets"] = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
                    spec["checkpoint"]["mirror"] = {"to": "s3://bench/ck", "endpoint": server.url,
                                                    "bwlimit": a.bwlimit}
                (tmp / "job" / "job.yaml").write_text(json.dumps(spec))
                job_id = gpujob(env, "submit", str(tmp / "job" / "job.yaml"), "--host", "local")["job_id"]
                times_file = tmp / "root" / "jobs" / job_id / "step_times.json"
                while not times_file.exists():
                    time.sleep(0.5)
                time.sleep(0.5)
                times = json.loads(times_file.read_text())
                med[mode].append(statistics.median(times))
                total = sum(times)
                print(json.dumps({"run": run, "mode": mode, "median_step_ms": round(1000 * med[mode][-1], 3),
                                  "train_s": round(total, 2)}), flush=True)
                while gpujob(env, "status", job_id, "--host", "local").get("state") not in ("succeeded", "failed"):
                    time.sleep(1)
                if mode == "on":  # the next run starts with the mirror idle
                    events = tmp / "root" / "jobs" / job_id / "events.jsonl"
                    while "mirror_done" not in events.read_text() and "mirror_wait_timeout" not in events.read_text():
                        time.sleep(0.5)
    finally:
        server.close()  # each job was waited for to its end (and its mirror's): nothing is left running
    off, on = statistics.median(med["off"]), statistics.median(med["on"])
    print(json.dumps({"mode": "steps", "median_step_ms_off": round(1000 * off, 3),
                      "median_step_ms_on": round(1000 * on, 3), "ratio": round(on / off, 4)}))
    shutil.rmtree(tmp, ignore_errors=True)


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
    cpu = {"by_hand": [], "mirror": []}  # core-seconds the rclone children used, per GB
    try:
        for run in range(a.runs):
            for mode in ("by_hand", "mirror"):
                dest = engine.dest("s3://bench/up", f"{mode}-{run}")
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                if mode == "by_hand":
                    subprocess.run([rclone, "copy", str(src), dest + "/checkpoint-1"], env=env, check=True)
                else:
                    rc = engine.Rclone(rclone, env, nice=not a.no_nice)
                    rc.copy(str(src), dest + "/checkpoint-1", False, lambda s: None)
                    rates["mirror_copy"].append(size / (time.perf_counter() - t) / 1e6)
                    rc.check(str(src), dest + "/checkpoint-1", False)
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
                      "cpu_s_per_GB_by_hand": round(statistics.median(cpu["by_hand"]), 2),
                      "cpu_s_per_GB_mirror": round(statistics.median(cpu["mirror"]), 2)}))


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("steps")
    s.add_argument("--steps", type=int, default=400)
    s.add_argument("--every", type=int, default=50)
    s.add_argument("--mb", type=int, default=64)
    s.add_argument("--bwlimit", default="40M")
    s.add_argument("--runs", type=int, default=2)
    u = sub.add_parser("upload")
    u.add_argument("--mb", type=int, default=256)
    u.add_argument("--files", type=int, default=4)
    u.add_argument("--runs", type=int, default=3)
    u.add_argument("--no-nice", action="store_true", help="the mirror's rclone at normal priority")
    a = ap.parse_args()
    steps(a) if a.what == "steps" else upload(a)


if __name__ == "__main__":
    main()
