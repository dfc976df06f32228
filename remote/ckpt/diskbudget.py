"""One disk-space budget for what gpujob itself writes beside a running job: the job's writes win.

The kept copy of a checkpoint saved in place (``keepcopy``) and a mirror target on the job's own disk
(``mirror.uploader``) take room the job's next save may need. Each asks ``Budget.allows`` before it
writes and ``Budget.short`` while what it wrote stays: the job is owed its next save, less what a
save in progress has already written, plus a margin, max(MIN_FREE, FREE_SHARE of the disk). Its next
save is the largest complete checkpoint seen in this run (a folder's files together; never less than
what a file truncated by a save in place held before). The save in progress is every file under the
checkpoint folder that is no complete checkpoint: a temporary file growing beside the original, a
file open for writing (``checkpoints`` asks ``/proc``). So a save that runs does not make the disk
look short, and a helper's copy can never take the room it still needs. What does not fit is not
written; what no longer fits is given up (deleted) by its owner. Standard library only, Python 3.8+.
"""

import os
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Union

from remote.ckpt import checkpoints as ck
from remote.ckpt import disk as diskfiles

MIN_FREE = 2 << 30  # the margin: max(MIN_FREE, FREE_SHARE of the disk)
FREE_SHARE = 0.10


def margin(total: int) -> int:
    return max(MIN_FREE, int(FREE_SHARE * total))


def disk(path: Path) -> Dict[str, int]:
    """Free and total bytes of the filesystem holding ``path`` (its nearest existing ancestor)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    st = os.statvfs(str(p))
    return {"free": st.f_bavail * st.f_frsize, "total": st.f_blocks * st.f_frsize, "dev": os.stat(str(p)).st_dev}


def _size(path: Path) -> int:
    return diskfiles._size(path) if path.is_dir() else path.stat().st_size


class Budget:
    """The job's claim on the disk holding its checkpoints, and what a helper may take beside it."""

    def __init__(self, ckpt_dir: Path, pattern: Optional[str] = None,
                 known: Callable[[], int] = lambda: 0) -> None:
        self.ckpt_dir, self.pattern, self.known = ckpt_dir, pattern, known
        self.largest = 0  # the largest save seen in this run (a save in place truncates its file first)

    def job_need(self, pids: Any = None) -> int:
        """Bytes the job's next save still needs: the largest complete checkpoint seen (or ``known``: the
        sizes the kept copies recorded), less what the save in progress wrote so far (``pids``: the
        job's processes, whose files open for writing are unfinished)."""
        sizes, written = [self.largest, self.known()], 0
        try:
            found = ck.find(self.ckpt_dir, self.pattern, pids)
            paths = set()
            for c in found:
                paths.add(c.path)
                try:
                    if c.complete:
                        sizes.append(_size(c.path))
                    else:
                        written += _size(c.path)
                except OSError:
                    pass
            for e in os.scandir(str(self.ckpt_dir)):  # a temporary name beside the original
                if e.is_file(follow_symlinks=False) and Path(e.path) not in paths:
                    written += e.stat(follow_symlinks=False).st_size
        except OSError:
            pass
        self.largest = max(sizes)
        return max(0, self.largest - written)

    def on_same_disk(self, path: Path) -> bool:
        try:
            return disk(path)["dev"] == disk(self.ckpt_dir)["dev"]
        except OSError:
            return True

    def reserve(self, path: Path, pids: Any = None) -> Dict[str, int]:
        """{free, need}: the free bytes of the disk holding ``path`` and what must stay free there: the
        job's next save (on the job's disk) and the margin."""
        d = disk(path)
        need = margin(d["total"]) + (self.job_need(pids) if self.on_same_disk(path) else 0)
        return {"free": d["free"], "need": need}

    def allows(self, path: Path, nbytes: int, pids: Any = None) -> bool:
        """Whether ``nbytes`` more under ``path`` leave the job's next save and the margin free."""
        r = self.reserve(path, pids)
        return r["free"] - nbytes >= r["need"]

    def short(self, path: Path, pids: Any = None) -> bool:
        """Whether the disk holding ``path`` has less free than must stay (what a helper keeps goes)."""
        r = self.reserve(path, pids)
        return r["free"] < r["need"]


def given_back_on_demand(job_path: Union[str, Path]) -> int:
    """Bytes the job's helpers hold under its folder and give up the moment the job needs the room (the
    kept copies): a measure of the job's free space (``autostop: disk_free_below``) counts them as free,
    so a copy never stops a job that would run on without it."""
    return _size(Path(job_path) / "kept") if (Path(job_path) / "kept").is_dir() else 0


def mb(n: int) -> str:
    return "{:.0f} MB".format(n / 1e6)
