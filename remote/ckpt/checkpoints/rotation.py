"""Rotation: delete old checkpoints of each series beyond ``keep``, never the newest complete one, the
one being resumed, the best ones or anything being written; stale half-written saves go too."""

import re
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Set

from .completeness import judge, open_writers
from .discovery import find
from .kinds import STALE, Checkpoint, PathLike, series_key, step_of, tree_mtime
from .openfiles import written_in
from .ranking import by_name_metric, hf_best


def _protected(found: List[Checkpoint], protect: Iterable[PathLike]) -> Set[Path]:
    """What rotation never deletes: the newest complete checkpoint, ``protect`` (the one being
    resumed), Lightning's last*.ckpt (and what a last link points at), the best ones."""
    keep: Set[Path] = set()
    complete = [c for c in found if c.complete]
    if complete:
        keep.add(complete[-1].path)
    for p in protect:
        if p:
            keep.add(Path(p))
    for c in found:
        if c.name.startswith("last") and c.kind == "lightning":
            keep.add(c.path)
            if c.path.is_symlink():
                keep.add(c.path.resolve())
    hf = hf_best(complete)
    if hf is not None:
        keep.add(hf.path)
    by_series: Dict[str, List[Checkpoint]] = {}
    for c in complete:
        if c.metrics:
            by_series.setdefault(series_key(c), []).append(c)
    for group in by_series.values():
        for m in set(k for c in group for k in c.metrics):
            b = by_name_metric(group, m)
            if b is not None:
                keep.add(b.path)
    return keep


def _remove(p: Path) -> None:
    import shutil  # here and in rotate: a status lists checkpoints through this package, removing none

    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(str(p), ignore_errors=True)
    else:
        try:
            p.unlink()
        except OSError:
            pass


def rotate(ckpt_dir: PathLike, keep: int, pattern: Optional[str] = None, pids: Any = None,
           protect: Iterable[PathLike] = ()) -> List[Path]:
    """Delete old checkpoints, keeping the newest ``keep`` complete ones of each series; return
    what was deleted, oldest first.

    A series is the checkpoints of one kind in one folder whose names differ only in their
    numbers (``checkpoint_100.pt``, ``checkpoint_200.pt``); a name without a number is never
    counted away. Never deleted: the newest complete checkpoint (even with ``keep`` < 1),
    ``protect`` (the one being resumed), ``last*.ckpt``, the best one (trainer_state.json's, a
    Lightning name's monitored value), anything open for writing. An incomplete checkpoint is
    deleted only when older than the newest complete one and unchanged for ``STALE`` seconds
    (a killed write); stale ``.tmp-step-*`` folders likewise.
    """
    keep = max(1, int(keep))
    base = Path(ckpt_dir)
    if not base.is_dir():
        return []
    found = find(base, pattern, check=False)
    writing = open_writers(found, base, pids) if found else set()
    judge(found, writing)
    complete = [c for c in found if c.complete]
    if not complete:
        return []
    safe = _protected(found, protect)
    safe |= {p.resolve() for p in safe}
    now = time.time()
    doomed: List[Checkpoint] = []
    series: Dict[str, List[Checkpoint]] = {}
    for c in complete:
        if c.step is not None:
            series.setdefault(series_key(c), []).append(c)
    for group in series.values():
        doomed += group[:-keep]
    newest = complete[-1]
    order = {id(c): i for i, c in enumerate(found)}
    for c in found:
        if not c.complete and order[id(c)] < order[id(newest)] and now - c.mtime >= STALE:
            doomed.append(c)
    deleted: List[Path] = []
    for c in doomed:
        if c.path in safe or c.path.resolve() in safe or written_in(c.path, writing):
            continue
        _remove(c.path)
        deleted.append(c.path)
    newest_step = max([c.step for c in complete if c.kind == "gpujob" and c.step is not None] or [-1])
    for tmp in base.glob(".tmp-step-*"):
        m = re.match(r"^\.tmp-step-(\d+)$", tmp.name)
        if m and int(m.group(1)) < newest_step and \
                now - tree_mtime(tmp, tmp.stat().st_mtime) >= STALE and not written_in(tmp, writing):
            import shutil

            shutil.rmtree(str(tmp), ignore_errors=True)
            deleted.append(tmp)
    return sorted(deleted, key=lambda q: (step_of(q.name.replace(".tmp-", "", 1)) or 0, q.name))
