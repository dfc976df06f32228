"""What code a run ran: git commit and the hash of the uncommitted diff, a hash of the tree sent,
and a kept copy of small trees (``<state>/snapshots/<hash>.tar.gz``) that ``rerun`` restores.

The tree is the one ``submit`` syncs (the project's ignore rules and ``exclude:`` apply); its
hash is over each file's path, mode and content, so the same code hashes the same wherever it lies.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import tarfile
import time
from pathlib import Path

from gpujob import helpercmd
from gpujob.config.ignore import walk
from gpujob.config.paths import atomicfile, state_dir

SNAPSHOT_MAX = 50 << 20  # trees larger than this are rerun from git (commit + diff) only
DIFF_MAX = 5 << 20  # an uncommitted change larger than this (data left untracked) is not kept as a diff
GIT_TIMEOUT_S = float(os.environ.get("GPUJOB_GIT_TIMEOUT", "60"))  # a filter or hook that hangs holds no submit


def git_state(workdir: Path, leave_out: list[str] | tuple[str, ...] = ()) -> tuple[str | None, str | None, str]:
    """(commit, sha256 of the uncommitted change or None when clean, that change as a binary diff)
    of the repository holding ``workdir``, paths relative to it. New files that git does not ignore
    are part of the change: they are added (intent only) to a copy of the index, never to the real one.
    ``leave_out``: paths (relative to ``workdir``) kept out of the diff (a job file holding secrets)."""
    import shutil
    import tempfile

    def git(*args: str, env: dict[str, str] | None = None) -> helpercmd.Finished:
        return helpercmd.run(["git", "-C", str(workdir), *args], GIT_TIMEOUT_S, f"git {args[0]} in {workdir}", env=env)

    try:
        head = git("rev-parse", "HEAD", "--git-path", "index")
    except (OSError, helpercmd.TimedOut):
        return None, None, ""
    lines = head.out.splitlines()
    if head.rc != 0 or len(lines) != 2:
        return None, None, ""
    commit, index = lines[0].strip(), Path(workdir, lines[1].strip())
    with tempfile.TemporaryDirectory(prefix="gpujob-index") as d:
        env = dict(os.environ, GIT_INDEX_FILE=str(Path(d) / "index"))
        if index.exists():
            shutil.copyfile(index, env["GIT_INDEX_FILE"])
        spec = ["--", ".", *(f":(exclude){p}" for p in leave_out)]
        try:
            git("add", "--intent-to-add", *spec, env=env)
            diff = git("diff", "HEAD", "--binary", "--relative", *spec, env=env).out
        except helpercmd.TimedOut as e:  # a clean filter or hook that hangs: the change is unknown, not "none"
            print(f"gpujob: {e.cause}: the run's git commit and change are not recorded (GPUJOB_GIT_TIMEOUT "
                  "gives git longer)", file=sys.stderr)
            return None, None, ""
    return commit, (hashlib.sha256(diff.encode()).hexdigest()[:16] if diff else None), diff


def tree_files(workdir: Path, exclude: list[str]) -> list[tuple[str, os.stat_result]]:
    return [(rel, st) for rel, st, is_dir in walk(workdir, exclude) if not is_dir
            and (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode))]


RACY_NS = 2 * 10**9  # a file changed this recently may change again within its mtime's tick: read it each time


def _file_digest(path: Path, st: os.stat_result) -> str:
    """One file's part of the hash: the agent's own function, so the host's check of a rerun's code
    (remote/data/codehash.py) and the laptop's hash cannot drift apart."""
    from gpujob.bundle import import_remote

    return import_remote("data.codehash")._digest(str(path), st)


def code_hash(workdir: Path, files: list[tuple[str, os.stat_result]]) -> str:
    """The tree's hash: each file's path, exec bit and content. Contents are read once: a cache
    keyed by size, mtime and inode (``<cache>/codehash/``) answers for files unchanged since."""
    import json

    from gpujob.config.paths import cache_dir

    cache_file = cache_dir() / "codehash" / (hashlib.sha256(str(workdir.resolve()).encode()).hexdigest()[:24] + ".json")
    try:
        old = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        old = {}
    new: dict[str, list] = {}
    now = time.time_ns()
    h = hashlib.sha256()
    for rel, st in files:
        key = [st.st_size, st.st_mtime_ns, st.st_ino]
        hit = old.get(rel) if isinstance(old, dict) else None
        digest = hit[3] if isinstance(hit, list) and len(hit) == 4 and hit[:3] == key else _file_digest(workdir / rel, st)
        if now - st.st_mtime_ns > RACY_NS:
            new[rel] = key + [digest]
        h.update(f"{rel}\0{st.st_mode & 0o111 and 1}\0{digest}\0".encode())
    if new != old:
        cache_file.parent.mkdir(exist_ok=True)
        atomicfile().write(cache_file, json.dumps(new), 0o600, durable=False)  # a cache: checked by stat on use
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


def restored_dir() -> Path:
    """Where ``rerun`` rebuilds a run's code (``<cache>/rerun/<hash>``): the user's code, sent as such
    (gpujob's other folders never are: usecases/secrecy/never_sent.py)."""
    from gpujob.config.paths import cache_dir

    return cache_dir() / "rerun"


def restore_snapshot(digest: str, dest: Path) -> bool:
    """Unpack the kept tree ``digest`` into ``dest`` (made); False when none was kept."""
    path = snapshot_path(digest)
    if not path.exists():
        return False
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path) as tar:
        tar.extractall(dest, filter="data")
    return True
