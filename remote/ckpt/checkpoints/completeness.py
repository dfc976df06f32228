"""Whether each checkpoint was fully written, by its kind's rule, and why not in the words status
shows; a script's own folder is also held against the one before it in its series."""

import re
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Set

from .formats import file_whole, zip_whole
from .kinds import (
    COMPLETE_MARKER,
    HF_INCOMPLETE,
    HF_STATE,
    SETTLE,
    WRITE_WINDOW,
    Checkpoint,
    series_key,
    step_of,
)
from .openfiles import open_for_writing, written_in


def open_writers(found: List[Checkpoint], base: Path, pids: Any) -> Set[str]:
    """Files open for writing under ``base``, looked up only when a kind needs it and something
    of that kind changed within ``WRITE_WINDOW`` s (every tick would read every process's fds)."""
    recent = time.time() - WRITE_WINDOW
    if not any(c.kind not in ("hf", "gpujob") and c.mtime >= recent for c in found):
        return set()
    return open_for_writing(pids, [str(base.resolve())])


def judge(found: List[Checkpoint], writing: Set[str]) -> None:
    now = time.time()
    for c in found:
        c.complete = judged_complete(c, writing, now)
        c.reason = None if c.complete else incomplete_reason(c, writing, now)
    before: Dict[str, Checkpoint] = {}
    for c in found:  # oldest first: each script folder against the one before it in its series
        if c.kind != "folder":
            continue
        prev = before.get(series_key(c))
        before[series_key(c)] = c
        if c.complete and prev is not None:
            c.reason = lacks(c.path, prev.path)
            c.complete = not c.reason


def _files(p: Path) -> Dict[str, str]:
    """The folder's file names by their shape, numbers as ``#`` (``model_4.pt`` in ``checkpoint-4``
    is ``model_3.pt`` in ``checkpoint-3``)."""
    try:
        return {re.sub(r"\d+", "#", str(f.relative_to(p))): str(f.relative_to(p)) for f in p.rglob("*") if f.is_file()}
    except OSError:
        return {}


def lacks(p: Path, prev: Path) -> Optional[str]:
    """A script's own folder saved file by file, cut short between two files (a full disk, a
    reboot, a kill) holds only whole files, so "settled" alone judged it complete: it must hold
    every file the one before it in its series holds."""
    had = _files(prev)
    missing = sorted(had[k] for k in set(had) - set(_files(p)))
    if not missing:
        return None
    return "lacks {}{} that {} holds (a save cut short?)".format(
        ", ".join(missing[:3]), " and {} more".format(len(missing) - 3) if len(missing) > 3 else "", prev.name)


def incomplete_reason(c: Checkpoint, writing: Set[str], now: float) -> str:
    """Why ``c`` is not (yet) complete, in the words status shows."""
    p = c.path
    if c.kind == "gpujob":
        return "no {} marker (the runtime helper writes it last)".format(COMPLETE_MARKER)
    if c.kind == "hf":
        if (p / HF_INCOMPLETE).exists():
            return "the Trainer marked it incomplete ({})".format(HF_INCOMPLETE)
        if not (p / HF_STATE).is_file():
            return "no {} (the Trainer writes it last)".format(HF_STATE)
        return "rng_state*.pth files missing (ranks 0..N)"
    if written_in(p, writing):
        return "a process of the job is writing it"
    if c.kind == "accelerate":
        return "random_states_<rank>.pkl missing or cut short (accelerate writes them last)"
    if c.kind == "deepspeed":
        return "the 'latest' file beside it does not name it or a newer tag"
    if c.kind == "folder":
        return "empty, or a file in it is cut short or changed within {:g} s".format(SETTLE)
    try:
        size = p.stat().st_size
    except OSError:
        return "gone"
    if size == 0:
        return "empty file"
    if zip_whole(p) is False or p.name.endswith(".safetensors"):
        return "cut short (its format is not whole: a write was killed or interrupted?)"
    return "changed within the last {:g} s".format(SETTLE)


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


def _accelerate_complete(p: Path) -> bool:
    ranks: Dict[int, Path] = {}
    for f in p.glob("random_states_*.pkl"):
        m = re.match(r"^random_states_(\d+)\.pkl$", f.name)
        if m:
            ranks[int(m.group(1))] = f
    if not ranks or set(ranks) != set(range(max(ranks) + 1)):
        return False
    return all(zip_whole(f) is not False for f in ranks.values())


def _deepspeed_complete(p: Path) -> bool:
    try:
        tag = (p.parent / "latest").read_text().strip()
    except OSError:
        return False
    if tag == p.name:
        return True
    mine, theirs = step_of(p), step_of(tag)
    return mine is not None and theirs is not None and theirs > mine and (p.parent / tag).is_dir()


def _settled_folder(p: Path, now: float) -> bool:
    try:
        files = [f for f in p.rglob("*") if f.is_file()]
    except OSError:
        return False
    return bool(files) and all(file_whole(f, now) for f in files)


def judged_complete(c: Checkpoint, writing: Set[str], now: float, world_size: Optional[int] = None) -> bool:
    p = c.path
    if c.kind == "gpujob":
        return (p / COMPLETE_MARKER).is_file()
    if c.kind == "hf":
        if not (p / HF_STATE).is_file() or (p / HF_INCOMPLETE).exists():
            return False
        return _rng_complete(p, world_size)
    if written_in(p, writing):
        return False
    if c.kind == "accelerate":
        return _accelerate_complete(p)
    if c.kind == "deepspeed":
        return _deepspeed_complete(p)
    if c.kind == "folder":
        return _settled_folder(p, now)
    return file_whole(p, now)
