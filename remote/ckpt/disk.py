"""Free space under the root: how much, and what a user could delete when it runs out."""

import os
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple  # noqa: F401 (Dict: in a type comment)

from remote.core.jsontypes import JSONObject

LOW_BYTES = int(os.environ.get("GPUJOB_DISK_LOW", str(256 << 20)))


def _size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(str(path)):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def biggest_checkpoints(jobs: Path, n: int = 3) -> List[Tuple[int, str]]:
    """The ``n`` largest checkpoint folders under ``<root>/jobs`` as (bytes, path), but no job's
    newest complete one."""
    found = []  # type: List[Tuple[int, str]]
    try:
        job_dirs = list(jobs.iterdir())
    except OSError:
        return []
    for j in job_dirs:
        ck = j / "ckpt"
        try:
            subs = [p for p in ck.iterdir() if p.is_dir() and not p.is_symlink()]
        except OSError:
            continue
        try:  # the newest complete checkpoint is the one to resume from: never suggested
            from remote.ckpt.checkpoints import latest_complete

            newest = latest_complete(ck)
        except (ImportError, OSError):
            newest = None
        subs = [p for p in subs if newest is None or p.name != newest.name]
        found += [(_size(p), str(p)) for p in subs]
    return sorted(found, reverse=True)[:n]


_cache = {}  # type: Dict[str, Tuple[float, Optional[JSONObject]]]


def report(root: Path) -> Optional[JSONObject]:
    """``_report``, once per second per root (``ls`` asks for every job; the kept agent lives on)."""
    key = str(root)
    hit = _cache.get(key)
    if hit and time.time() - hit[0] < 1.0:
        return hit[1]
    doc = _report(root)
    _cache[key] = (time.time(), doc)
    return doc


def _report(root: Path) -> Optional[JSONObject]:
    """None while the root's disk has room; else its free bytes and what to delete."""
    try:
        st = os.statvfs(str(root))
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if free >= min(LOW_BYTES, st.f_blocks * st.f_frsize // 10):
        return None
    big = biggest_checkpoints(root / "jobs")
    what = "; ".join("{} ({:.0f} MB)".format(p, b / 1e6) for b, p in big) or "old job folders under {}".format(root / "jobs")
    return {"free_bytes": free, "root": str(root),
            "advice": "the disk holding {} has {:.1f} MB free: delete what you no longer need, older checkpoints, "
                      "largest first: {} (gpujob pull JOB keeps a copy first; a smaller checkpoint.keep keeps fewer)".format(
                          root, free / 1e6, what)}
