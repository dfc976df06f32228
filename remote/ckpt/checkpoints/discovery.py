"""Finding checkpoints: the walk below the checkpoint folder (or the user's pattern), their order,
and the newest complete one (what GPUJOB_RESUME names)."""

import os
import re
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Set

from .completeness import judge, judged_complete, lacks, open_writers
from .kinds import HF_NAME, Checkpoint, PathLike, classify, folder_kind, name_stem, series_key
from .openfiles import open_for_writing

FIND_DEPTH, FIND_ENTRIES = 3, 5000  # how far below the checkpoint folder discovery looks
WALK_SKIP = {"__pycache__", "node_modules", "site-packages", "wandb", "mlruns", "venv", "env", "runs"}


def _candidates(base: Path, pattern: Optional[str]) -> List[Path]:
    if pattern:
        return sorted(base.glob(pattern))
    return _walk(base, FIND_DEPTH)


def _walk(base: Path, depth: int, follow: bool = True) -> List[Path]:
    """Every entry up to ``depth`` folders below ``base`` (accelerate's ``checkpoints/checkpoint_<n>``,
    Lightning's ``lightning_logs/version_N/checkpoints/``, an image trainer's ``<experiment>/``), not
    inside checkpoint folders themselves, hidden or tool folders; bounded in entries too."""
    found: List[Path] = []
    todo = [(base, 0)]
    while todo and len(found) < FIND_ENTRIES:
        folder, level = todo.pop(0)
        try:
            names = sorted(os.listdir(str(folder)))
        except OSError:
            continue
        for n in names:
            p = folder / n
            found.append(p)
            if level < depth and not n.startswith(".") and n not in WALK_SKIP and p.is_dir() and \
                    (follow or not p.is_symlink()) and folder_kind(p) is None and not HF_NAME.match(n):
                todo.append((p, level + 1))
    return found


def find(ckpt_dir: PathLike, pattern: Optional[str] = None, pids: Any = None,
         check: bool = True) -> List[Checkpoint]:
    """The checkpoints in ``ckpt_dir`` (or matching the glob ``pattern`` under it), oldest first.

    With ``check`` each one's ``complete`` is decided; ``pids`` are the processes whose open
    files count as "being written" (None: every process this user can see).
    """
    base = Path(ckpt_dir)
    if not base.is_dir():
        return []
    seen: Set[Path] = set()
    found: List[Checkpoint] = []
    for p in _candidates(base, pattern):
        if p in seen:
            continue
        seen.add(p)
        c = classify(p, bool(pattern))
        if c is not None:
            found.append(c)
    # loose files beside checkpoint folders (a final model.safetensors, training_args.bin) are not
    # checkpoints, unless the user's pattern asked for them
    if not pattern:
        with_folders = {c.path.parent for c in found if c.is_dir}
        found = [c for c in found if c.is_dir or c.kind == "lightning" or c.path.parent not in with_folders]
        found = _in_checkpoint_folders(found, base)
    found = _ordered(found)
    if check and found:
        judge(found, open_writers(found, base, pids))
    return found


_CKPT_WORD = re.compile(r"ckpt|checkpoint|last|best|epoch|step", re.I)


def _in_checkpoint_folders(found: List[Checkpoint], base: Path) -> List[Checkpoint]:
    """Single files below the checkpoint folder's own level count where their folder holds checkpoints
    (an image trainer's ``<experiment>/checkpoint-N.pth.tar``, ``last.pth.tar``): a name with a step or
    a checkpoint word. A final model saved into a subfolder (``final/model.safetensors``) does not."""
    home = {base, base / "checkpoints"}
    ok: Dict[Path, bool] = {}
    for c in found:
        parent = c.path.parent
        if not c.is_dir and parent not in home and parent.name != "checkpoints":
            ok[parent] = ok.get(parent, False) or c.step is not None or bool(_CKPT_WORD.search(name_stem(c.name)))
    return [c for c in found if c.is_dir or ok.get(c.path.parent, True)]


def _ordered(found: List[Checkpoint]) -> List[Checkpoint]:
    """Oldest first. Within a series (names differing only in their numbers) the step in the name
    decides; across series, whose numbers need not compare (accelerate counts saves, Lightning
    steps), and for names without a step, the time does. A series' times are made monotone along
    its steps, so that both rules agree."""
    eff: Dict[int, float] = {}
    series: Dict[str, List[Checkpoint]] = {}
    for c in found:
        if c.step is not None:
            series.setdefault(series_key(c), []).append(c)
    for group in series.values():
        t = float("-inf")
        for c in sorted(group, key=lambda c: (c.step, c.mtime, c.name)):
            t = max(t, c.mtime)
            eff[id(c)] = t
    return sorted(found, key=lambda c: (eff.get(id(c), c.mtime), -1 if c.step is None else c.step, c.name))


def is_complete(path: PathLike, world_size: Optional[int] = None, pids: Any = None) -> bool:
    """True when the checkpoint (folder or file) at ``path`` was fully written.

    ``world_size`` (the number of training processes), when known, makes the Trainer check
    exact: every ``rng_state_<rank>.pth`` must be there. ``pids``: see ``find``.
    """
    p = Path(path)
    c = classify(p, by_pattern=True)
    if c is None:
        return False
    writing = set() if c.kind in ("gpujob", "hf") else open_for_writing(pids, [str(p.parent.resolve())])
    if c.kind == "folder" and judged_complete(c, writing, time.time(), world_size):
        earlier = [(q.step, q.path) for q in (classify(x, True) for x in p.parent.iterdir() if x.is_dir() and x != p)
                   if q is not None and q.kind == "folder" and series_key(q) == series_key(c)
                   and q.step is not None and c.step is not None and q.step < c.step]
        return not earlier or lacks(p, max(earlier)[1]) is None
    return judged_complete(c, writing, time.time(), world_size)


def list_checkpoints(ckpt_dir: PathLike, pattern: Optional[str] = None) -> List[Path]:
    """Checkpoint folders and files in ``ckpt_dir``, oldest first (no completeness check)."""
    return [c.path for c in find(ckpt_dir, pattern, check=False)]


def latest(ckpt_dir: PathLike, pattern: Optional[str] = None, pids: Any = None
           ) -> Optional[Checkpoint]:
    """The newest complete checkpoint, or None."""
    for c in reversed(find(ckpt_dir, pattern, pids)):
        if c.complete:
            return c
    return None


def latest_complete(ckpt_dir: PathLike, pattern: Optional[str] = None, pids: Any = None
                    ) -> Optional[Path]:
    """The newest complete checkpoint's path in ``ckpt_dir``, or None."""
    c = latest(ckpt_dir, pattern, pids)
    return c.path if c else None
