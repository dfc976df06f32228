"""What code a run ran: git commit and the hash of the uncommitted diff, a hash of the tree sent,
and a kept copy of small trees (``<state>/snapshots/<hash>.tar.gz``) that ``rerun`` restores.

The tree is the one ``submit`` syncs (the project's ignore rules and ``exclude:`` apply); its
hash is over each file's path, mode and content, so the same code hashes the same wherever it lies.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import tarfile
from pathlib import Path

from gpujob.config.ignore import walk
from gpujob.config.paths import state_dir

SNAPSHOT_MAX = 50 << 20  # trees larger than this are rerun from git (commit + diff) only


def git_state(workdir: Path) -> tuple[str | None, str | None, str]:
    """(commit, sha256 of ``git diff HEAD`` or None when clean, the diff) of the repository holding ``workdir``."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(workdir), *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
    except (OSError, subprocess.TimeoutExpired):
        return None, None, ""
    if head.returncode != 0:
        return None, None, ""
    diff = git("diff", "HEAD", "--binary", "--relative").stdout  # paths relative to workdir, like the new files'
    untracked = git("ls-files", "--others", "--exclude-standard", "--", ".").stdout.split()
    for rel in untracked:  # new files are part of the uncommitted change, as a diff
        diff += git("diff", "--no-index", "--binary", "/dev/null", rel).stdout
    return head.stdout.strip(), (hashlib.sha256(diff.encode()).hexdigest()[:16] if diff else None), diff


def tree_files(workdir: Path, exclude: list[str]) -> list[tuple[str, os.stat_result]]:
    return [(rel, st) for rel, st, is_dir in walk(workdir, exclude) if not is_dir
            and (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode))]


def code_hash(workdir: Path, files: list[tuple[str, os.stat_result]]) -> str:
    h = hashlib.sha256()
    for rel, st in files:
        h.update(f"{rel}\0{st.st_mode & 0o111 and 1}\0".encode())
        p = workdir / rel
        if stat.S_ISLNK(st.st_mode):
            h.update(os.readlink(p).encode())
        else:
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()[:16]


def snapshot_path(digest: str) -> Path:
    d = state_dir() / "snapshots"
    d.mkdir(exist_ok=True)
    return d / f"{digest}.tar.gz"


def keep_snapshot(workdir: Path, files: list[tuple[str, os.stat_result]], digest: str) -> bool:
    """Keep the tree as ``<hash>.tar.gz`` (once per hash); False when it is too large to keep."""
    path = snapshot_path(digest)
    if path.exists():
        return True
    if sum(st.st_size for _, st in files) > SNAPSHOT_MAX:
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    with tarfile.open(tmp, "w:gz", compresslevel=1) as tar:
        for rel, _ in files:
            tar.add(workdir / rel, arcname=rel, recursive=False)
    os.replace(tmp, path)
    return True


def restore_snapshot(digest: str, dest: Path) -> bool:
    """Unpack the kept tree ``digest`` into ``dest`` (made); False when none was kept."""
    path = snapshot_path(digest)
    if not path.exists():
        return False
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path) as tar:
        tar.extractall(dest, filter="data")
    return True
