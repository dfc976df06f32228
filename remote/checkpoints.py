"""Checkpoint completeness, listing and rotation.

Standard library only, Python 3.8+, importable on its own (no relative imports): the agent
uses it to compute GPUJOB_RESUME, and the runtime helper imports it as ``gpujob_checkpoints``.

Two layouts are understood, both as sub-folders of the checkpoint folder:

- Hugging Face Trainer: ``checkpoint-<N>/``. Complete when ``trainer_state.json`` exists (the
  Trainer writes it last), at least one ``rng_state*.pth`` is there (all of them when the
  world size is known from the state) and ``checkpoint-is-incomplete.txt`` is absent.
- gpujob's own layout: ``step-<N>/``, written as ``.tmp-step-<N>/`` and renamed. Complete when
  the marker file ``.gpujob-complete`` exists (written last, after the data files are synced).
"""

import re
import shutil
from pathlib import Path
from typing import List, Optional, Union

COMPLETE_MARKER = ".gpujob-complete"
HF_INCOMPLETE = "checkpoint-is-incomplete.txt"
HF_STATE = "trainer_state.json"

_NAME = re.compile(r"^(checkpoint|step)-(\d+)$")

PathLike = Union[str, Path]


def step_of(path: PathLike) -> Optional[int]:
    """The step number in a checkpoint folder's name, or None if the name is not one."""
    m = _NAME.match(Path(path).name)
    return int(m.group(2)) if m else None


def _rng_complete(path: Path, world_size: Optional[int]) -> bool:
    """Whether the rng_state files a Trainer checkpoint needs are all there."""
    names = {f.name for f in path.glob("rng_state*.pth") if f.is_file()}
    if not names:
        return False
    ranks = set()
    for name in names:
        m = re.match(r"^rng_state_(\d+)\.pth$", name)
        if m:
            ranks.add(int(m.group(1)))
    if world_size is not None and world_size > 1:
        return ranks >= set(range(world_size))
    if world_size == 1:
        return "rng_state.pth" in names or 0 in ranks
    # World size unknown: per-rank files must run 0..max without a gap.
    return not ranks or ranks == set(range(max(ranks) + 1))


def is_complete(path: PathLike, world_size: Optional[int] = None) -> bool:
    """True when the checkpoint folder at ``path`` was fully written.

    ``world_size`` (the number of training processes), when known, makes the Trainer check
    exact: every ``rng_state_<rank>.pth`` must be there.
    """
    p = Path(path)
    if not p.is_dir():
        return False
    m = _NAME.match(p.name)
    if m and m.group(1) == "step":
        return (p / COMPLETE_MARKER).is_file()
    if not (p / HF_STATE).is_file() or (p / HF_INCOMPLETE).exists():
        return False
    return _rng_complete(p, world_size)


def list_checkpoints(ckpt_dir: PathLike) -> List[Path]:
    """Checkpoint folders (``checkpoint-N`` or ``step-N``) in ``ckpt_dir``, by step ascending."""
    d = Path(ckpt_dir)
    if not d.is_dir():
        return []
    found = []
    for child in d.iterdir():
        n = step_of(child)
        if n is not None and child.is_dir():
            found.append((n, child.name, child))
    found.sort(key=lambda t: (t[0], t[1]))
    return [t[2] for t in found]


def latest_complete(ckpt_dir: PathLike) -> Optional[Path]:
    """The newest complete checkpoint in ``ckpt_dir``, or None."""
    for p in reversed(list_checkpoints(ckpt_dir)):
        if is_complete(p):
            return p
    return None


def rotate(ckpt_dir: PathLike, keep: int) -> List[Path]:
    """Delete old checkpoints, keeping the newest ``keep`` complete ones; return what was deleted.

    The newest complete checkpoint is never deleted (even with ``keep`` < 1). Incomplete
    folders are deleted only when older than the newest complete one (a newer incomplete one
    may still be being written). Stale ``.tmp-step-*`` folders older than it go too.
    """
    keep = max(1, int(keep))
    all_ckpts = list_checkpoints(ckpt_dir)
    complete = [p for p in all_ckpts if is_complete(p)]
    if not complete:
        return []
    newest = complete[-1]
    newest_step = step_of(newest)
    kept = set(complete[-keep:])
    doomed = [p for p in complete if p not in kept]
    doomed += [p for p in all_ckpts if p not in complete and (step_of(p) or 0) < (newest_step or 0)]
    for tmp in Path(ckpt_dir).glob(".tmp-step-*"):
        m = re.match(r"^\.tmp-step-(\d+)$", tmp.name)
        if m and int(m.group(1)) < (newest_step or 0):
            doomed.append(tmp)
    deleted = []
    for p in doomed:
        if p == newest:
            continue
        shutil.rmtree(str(p), ignore_errors=True)
        deleted.append(p)
    return sorted(deleted, key=lambda q: (step_of(q.name.replace(".tmp-", "", 1)) or 0, q.name))
