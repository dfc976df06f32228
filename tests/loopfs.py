"""A real small filesystem for disk-space tests: ext4 in a sparse file, loop-mounted (root and mount(8)).

Unlike a tmpfs it takes no memory: ``posix_fallocate`` reserves its blocks without writing them, so a
test can shape a disk of a few GiB (a job's data, its saves) at the cost of a few MB on the real disk.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import kill_job_processes


@contextlib.contextmanager
def loopfs(tmp_path: Path, size: str) -> Iterator[Path]:
    """An ext4 of ``size`` (truncate's units) mounted on ``tmp_path/loopfs``; unmounted afterwards
    (skips where loop mounts are not allowed here)."""
    if os.geteuid() != 0 or not (shutil.which("mount") and shutil.which("mkfs.ext4")):
        pytest.skip("needs root, mount(8) and mkfs.ext4 for a loop-mounted filesystem")
    img, mnt = tmp_path / "loopfs.img", tmp_path / "loopfs"
    tmp_path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["truncate", "-s", size, str(img)], check=True)
    r = subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1", str(img)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed here: {r.stderr.strip()}")
    mnt.mkdir()
    r = subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot loop-mount here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        kill_job_processes(mnt)
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)  # the loop device goes with it (autoclear)


def allocate(path: Path, nbytes: int) -> None:
    """Take ``nbytes`` of the disk holding ``path`` (blocks reserved, nothing written)."""
    fd = os.open(str(path), os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.posix_fallocate(fd, 0, nbytes)
    finally:
        os.close(fd)


def free(path: Path) -> int:
    st = os.statvfs(str(path))
    return st.f_bavail * st.f_frsize
