"""`pull` says "pulled" only of what arrived whole: a checkpoint the job is still writing in place
is waited for or left out (non-zero exit), and a full laptop disk is named at once with the bytes
needed (a real small tmpfs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.helpers import submit, wait_for, wait_state, write_job

MB = 1 << 20
# writes ckpt/model.pt in place, 6 MB now, 6 MB more once the test creates RELEASE
WRITER = """
    import os, time
    from pathlib import Path
    release = Path({release!r})
    with open(Path(os.environ["GPUJOB_CKPT_DIR"]) / "model.pt", "wb") as f:
        f.write(b"a" * (6 << 20))
        f.flush()
        while not release.exists():
            time.sleep(0.05)
        f.write(b"b" * (6 << 20))
    print("saved", flush=True)
"""


def _ckpt(tmp_path: Path, job_id: str) -> Path:
    return tmp_path / "local-root" / "jobs" / job_id / "ckpt" / "model.pt"


def test_pull_waits_for_or_leaves_out_a_file_being_written(tmp_path: Path) -> None:
    release = tmp_path / "release"
    job_id = submit("local", write_job(tmp_path, "wr", WRITER.format(release=str(release)), "python main.py"))["job_id"]
    model = _ckpt(tmp_path, job_id)
    wait_for(lambda: model.exists() and model.stat().st_size == 6 * MB, 60, "the writer's first 6 MB")

    # a short wait: the half-written file is left out, named, and the exit is not 0
    r = run_cli("pull", job_id, str(tmp_path / "short"), "--write-wait", "0.3")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "ckpt/model.pt NOT pulled" in r.stderr and "still writing" in r.stderr
    assert not (tmp_path / "short" / job_id / "ckpt" / "model.pt").exists()
    assert (tmp_path / "short" / job_id / "output.log").exists()  # the rest came
    r = run_cli("pull", job_id, str(tmp_path / "short2"), "--write-wait", "0", "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["held"] == ["ckpt/model.pt"], r.stdout + r.stderr

    # a pull that waits: it says so; Ctrl-C then says what is kept
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "pull", job_id, str(tmp_path / "cut")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)
    try:
        assert p.stderr is not None and "is open for writing" in p.stderr.readline()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130 and "pull interrupted: the files that arrived whole are in" in err, out + err
    assert "run pull again" in err and "Traceback" not in err, err

    # ... and brings the whole file once the writer closes it
    p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "pull", job_id, str(tmp_path / "full")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)
    try:
        assert p.stderr is not None
        line = p.stderr.readline()
        assert "ckpt/model.pt is open for writing" in line and "waiting up to 30s" in line, line
        release.write_text("")
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 0, out + err
    got = (tmp_path / "full" / job_id / "ckpt" / "model.pt").read_bytes()
    assert got == b"a" * (6 * MB) + b"b" * (6 * MB)
    wait_state("local", job_id, ("succeeded",))


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real 3 MB tmpfs (mount needs root: skipped where there is none)."""
    d = tmp_path / "small-disk"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(d)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def test_pull_names_a_full_disk_at_once(tmp_path: Path, small_disk: Path) -> None:
    job = write_job(tmp_path, "big", """
        import os
        from pathlib import Path
        (Path(os.environ["GPUJOB_CKPT_DIR"]) / "model.pt").write_bytes(os.urandom(8 << 20))
    """, "python main.py")
    job_id = submit("local", job)["job_id"]
    wait_state("local", job_id, ("succeeded",))
    r = run_cli("pull", job_id, str(small_disk), timeout=30)
    assert r.returncode == 2, r.stdout + r.stderr
    said = " ".join(r.stderr.split())
    assert "no room on the disk holding" in said and "the pull needs" in said and "bytes free" in said, said
    assert "Traceback" not in r.stderr



def test_pull_names_a_disk_that_fills_mid_write(tmp_path: Path, small_disk: Path) -> None:
    # 1200 files of 64 bytes: 77 KB by the count before the transfer, but each takes a 4 KB page of
    # the 3 MB tmpfs, so the disk fills part-way through writing (a real ENOSPC, not the early check)
    job = write_job(tmp_path, "many", """
        import os
        from pathlib import Path
        d = Path(os.environ["GPUJOB_CKPT_DIR"]) / "shards"
        d.mkdir()
        for i in range(1200):
            (d / f"{i:04d}.bin").write_bytes(os.urandom(64))
    """, "python main.py")
    job_id = submit("local", job)["job_id"]
    wait_state("local", job_id, ("succeeded",))
    t0 = time.monotonic()
    r = run_cli("pull", job_id, str(small_disk), timeout=60)
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stdout + r.stderr
    said = " ".join(r.stderr.split())
    assert f"no room on the disk holding {small_disk}" in said and "bytes free, the pull needs" in said, said
    assert "Traceback" not in r.stderr and took < 20, (took, said)
    shards = small_disk / job_id / "ckpt" / "shards"
    assert shards.is_dir() and any(shards.iterdir()), "the disk filled before any file was written"
