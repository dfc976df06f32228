"""Which files processes hold open for writing, read from ``/proc`` (fd links and fdinfo flags): a
checkpoint being written is not complete, not rotated away and not cut by a stop signal."""

import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, List, Optional, Set, Tuple

from .kinds import FILE_EXTS, PathLike

PROC = "/proc"
WRITE_MODES = (os.O_WRONLY, os.O_RDWR)


def _writing(fdinfo: str) -> bool:
    try:
        with open(fdinfo) as f:
            for line in f:
                if line.startswith("flags:"):
                    return (int(line.split()[1], 8) & os.O_ACCMODE) in WRITE_MODES
    except (OSError, ValueError, IndexError):
        pass
    return False


def write_fds(pids: Optional[Iterable[Any]], wanted: Callable[[str], bool]) -> Iterator[Tuple[int, str]]:
    """``(pid, path)`` for every file one of ``pids`` (None: every process this user can see)
    holds open for writing whose path ``wanted`` accepts (asked before the fdinfo is read)."""
    if pids is None:
        try:
            pids = [d for d in os.listdir(PROC) if d.isdigit()]
        except OSError:
            return
    for pid in pids:
        fd_dir = "{}/{}/fd".format(PROC, pid)
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd_dir + "/" + fd)
            except OSError:
                continue
            if wanted(target) and _writing("{}/{}/fdinfo/{}".format(PROC, pid, fd)):
                yield int(pid), target


def open_for_writing(pids: Any, under: List[str]) -> Set[str]:
    """Paths under any of ``under`` that one of ``pids`` holds open for writing (/proc fd + fdinfo).

    ``pids``: the processes to look at (None: every process this user can see; a callable is
    called for them)."""
    if callable(pids):
        pids = pids()
    prefixes = tuple(u.rstrip("/") + "/" for u in under)
    return {path for _, path in write_fds(pids, lambda t: t.startswith(prefixes))}


SAVED_EXTS = FILE_EXTS + (".pkl", ".npy", ".npz", ".pdparams", ".h5", ".keras")


def being_saved(ckpt_dir: PathLike, pids: Any) -> List[str]:
    """Checkpoint-like files (by extension, under a temporary name too) that one of ``pids`` holds open
    for writing under ``ckpt_dir``: a stop signal now would cut them short (``torch.save`` interrupted
    leaves a file torch.load rejects). Logs and TensorBoard event files a job keeps open are not."""
    base = Path(ckpt_dir)
    if not base.is_dir():
        return []
    out = []
    for path in sorted(open_for_writing(pids, [str(base.resolve())])):
        name = re.sub(r"(\.tmp|\.part|\.partial|~)$", "", os.path.basename(path))
        if name.endswith(SAVED_EXTS) and "tfevents" not in name:
            out.append(path)
    return out


def written_in(path: Path, writing: Set[str]) -> bool:
    if not writing:
        return False
    real = str(path.resolve())
    return real in writing or any(w.startswith(real + "/") for w in writing)
