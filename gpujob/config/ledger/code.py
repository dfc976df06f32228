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
import threading
import time
from pathlib import Path
from typing import Callable

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


def _digester() -> Callable[[str, os.stat_result], str]:
    """One file's part of the hash: the agent's own function, so the host's check of a rerun's code
    (remote/data/codehash.py) and the laptop's hash cannot drift apart. Looked up once per tree:
    each ``import_remote`` checks the agent package's place (about 0.4 ms, a second per 3,000 files)."""
    from gpujob.bundle import import_remote

    return import_remote("data.codehash").file_digest


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
    digest_of, top = _digester(), str(workdir)
    h = hashlib.sha256()
    for rel, st in files:
        key = [st.st_size, st.st_mtime_ns, st.st_ino]
        hit = old.get(rel) if isinstance(old, dict) else None
        digest = hit[3] if isinstance(hit, list) and len(hit) == 4 and hit[:3] == key else \
            digest_of(os.path.join(top, rel), st)
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


class Snapshot:
    """The tree kept as ``<hash>.tar.gz`` by a thread of its own, while the submit connects and
    syncs (on a first submit of 3,000 files the tarball was a second or more in front of the
    upload); ``kept()`` waits for it. A file whose stat moved since it was hashed leaves no
    snapshot (the tarball would not be the code the hash names). Not a daemon: a process that
    ends meanwhile finishes the file instead of leaving half of one."""

    def __init__(self, workdir: Path, files: list[tuple[str, os.stat_result]], digest: str) -> None:
        self.path = snapshot_path(digest)
        self.result: bool | None = None
        self.thread = threading.Thread(target=self._write, args=(workdir, files), name="gpujob-snapshot")
        self.thread.start()

    def _write(self, workdir: Path, files: list[tuple[str, os.stat_result]]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            self.result = write_tar(tmp, str(workdir), files)
            if self.result:
                os.replace(tmp, self.path)
        except OSError:
            self.result = False
        finally:
            if not self.result:
                tmp.unlink(missing_ok=True)

    def kept(self) -> bool:
        self.thread.join()
        return bool(self.result)


_pending: dict[str, Snapshot] = {}  # digest -> the snapshot being written (a sweep submits one tree often)
_pending_lock = threading.Lock()


def start_snapshot(workdir: Path, files: list[tuple[str, os.stat_result]], digest: str) -> Snapshot | bool:
    """Start keeping the tree (once per hash): a ``Snapshot`` to ask ``kept()`` later, True when it
    is kept already, False when it is too large to keep."""
    with _pending_lock:
        cur = _pending.get(digest)
        if cur is not None and (cur.thread.is_alive() or cur.result):
            return cur
        if snapshot_path(digest).exists():
            return True
        if sum(st.st_size for _, st in files) > SNAPSHOT_MAX:
            return False
        _pending[digest] = snap = Snapshot(workdir, files, digest)
        return snap


def keep_snapshot(workdir: Path, files: list[tuple[str, os.stat_result]], digest: str) -> bool:
    """Keep the tree as ``<hash>.tar.gz`` (once per hash); False when it is too large to keep."""
    snap = start_snapshot(workdir, files, digest)
    return snap if isinstance(snap, bool) else snap.kept()


def write_tar(dest: Path, top: str, files: list[tuple[str, os.stat_result]]) -> bool:
    """``files`` (as hashed) into the gzip tarball ``dest``; False when one changed since. Headers
    from the stats in hand, whole-second mtimes: no owner lookup and no extended header per file
    (``tarfile.add`` spent two thirds of its time on those)."""
    with tarfile.open(dest, "w:gz", compresslevel=1) as tar:
        for rel, st in files:
            path = os.path.join(top, rel)
            now = os.lstat(path)
            if (now.st_size, now.st_mtime_ns, now.st_ino, now.st_mode) != (st.st_size, st.st_mtime_ns, st.st_ino,
                                                                            st.st_mode):
                return False
            info = tarfile.TarInfo(rel)
            info.mode, info.mtime, info.uid, info.gid = stat.S_IMODE(st.st_mode), st.st_mtime_ns // 10**9, st.st_uid, \
                st.st_gid
            if stat.S_ISLNK(st.st_mode):
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
                tar.addfile(info)
                continue
            info.size = st.st_size
            with open(path, "rb") as f:
                tar.addfile(info, f)
    return True


def restored_dir() -> Path:
    """Where ``rerun`` rebuilds a run's code (``<cache>/rerun/<hash>``): the user's code, sent as such
    (gpujob's other folders never are: usecases/secrets/never_sent.py)."""
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
