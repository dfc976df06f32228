"""What a checkpoint is: the kinds' names and constants, the ``Checkpoint`` record, the step and
monitored values in a name, and which kind a path on disk is (the package's ``__init__`` tells each
kind's completeness rule)."""

import os
import re
from pathlib import Path
from typing import Dict, Optional, TypedDict, Union

COMPLETE_MARKER = ".gpujob-complete"
HF_INCOMPLETE = "checkpoint-is-incomplete.txt"
HF_STATE = "trainer_state.json"
FILE_EXTS = (".pt", ".pth", ".bin", ".safetensors", ".tar", ".ckpt")
SETTLE = 2.0  # seconds a file of unknown format must stay unchanged to count as whole
STALE = 60.0  # seconds an incomplete checkpoint must stay unchanged before rotation may delete it
WRITE_WINDOW = 60.0  # a checkpoint unchanged for longer is not looked for among open files
FOLDER_KINDS = ("hf", "gpujob", "accelerate", "deepspeed", "folder")
# files beside checkpoints that are not checkpoints themselves
SIDE_FILES = re.compile(r"^(training_args\.bin|rng_state(_\d+)?\.pth|optimizer\.(pt|bin)|scheduler\.(pt|bin)|"
                        r"scaler\.pt|random_states_\d+\.pkl)$")
_TEMP = re.compile(r"(^\.|\.tmp$|\.part$|\.partial$|\.gpujob-part|~$|\.tmp\.|^tmp\.)")  # ^tmp.: timm's tmp.pth.tar
HF_NAME = re.compile(r"^checkpoint-(\d+)$")
HF_SIGNS = {"config.json", "adapter_config.json", "training_args.bin", "trainer_state.json"}
_OWN_NAME = re.compile(r"^step-(\d+)$")
_ACC_NAME = re.compile(r"^checkpoint_(\d+)$")
_DS_NAME = re.compile(r"^global_step(\d+)$")
_STEP_IN_NAME = re.compile(r"(?:^|[-_=.])step[=_-]?(\d+)(?![\d.])")
# a number after a word or separator (model_000100, iter90); a name that is only a number (shards/0000.bin)
# or a shard's index (model-00001-of-00004) numbers the parts of one save: no step, so never rotated away
_TRAILING = re.compile(r"(?:[-_.]|[A-Za-uw-z])(?<!-of-)(\d+)$")
_NAME_METRIC = re.compile(r"(?:^|[-_])([A-Za-z][\w/.]*?)=(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?=$|-)")

PathLike = Union[str, Path]


class CheckpointDoc(TypedDict, total=False):
    """A checkpoint as status and ``resume_point`` show it (``Checkpoint.as_dict``)."""
    name: str  # under the base given (ckpt/)
    kind: str
    step: Optional[int]
    complete: bool
    mtime: float
    metrics: Dict[str, float]
    incomplete_reason: str


class Checkpoint(object):
    """One checkpoint: a folder (folder kinds) or a file (``lightning``, ``file``)."""

    __slots__ = ("path", "kind", "step", "mtime", "metrics", "complete", "reason")

    def __init__(self, path: Path, kind: str, step: Optional[int], mtime: float, metrics: Dict[str, float]) -> None:
        self.path, self.kind, self.step, self.mtime, self.metrics = path, kind, step, mtime, metrics
        self.complete: bool = False
        self.reason: Optional[str] = None  # why it is not complete (when checked)

    @property
    def is_dir(self) -> bool:
        return self.kind in FOLDER_KINDS

    @property
    def name(self) -> str:
        return self.path.name

    def rel(self, base: PathLike) -> str:
        try:
            return str(self.path.relative_to(Path(base)))
        except ValueError:
            return str(self.path)

    def as_dict(self, base: PathLike) -> CheckpointDoc:
        d: CheckpointDoc = {"name": self.rel(base), "kind": self.kind, "step": self.step,
                             "complete": self.complete, "mtime": round(self.mtime, 3), "metrics": self.metrics}
        if not self.complete and self.reason:
            d["incomplete_reason"] = self.reason
        return d

    def __repr__(self) -> str:
        return "Checkpoint({}, {}, step={}, complete={})".format(self.path, self.kind, self.step, self.complete)


def name_stem(name: str) -> str:
    """The name without its checkpoint extensions, all of them (``checkpoint-14.pth.tar``)."""
    cut = True
    while cut:
        cut = False
        for ext in FILE_EXTS:
            if name.endswith(ext) and len(name) > len(ext):
                name, cut = name[: -len(ext)], True
                break
    return name


def step_of(path: PathLike) -> Optional[int]:
    """The step number in a checkpoint's name, or None if the name carries none."""
    name = Path(path).name
    for rx in (HF_NAME, _OWN_NAME, _ACC_NAME, _DS_NAME):
        m = rx.match(name)
        if m:
            return int(m.group(1))
    stem = name_stem(name)
    if stem.startswith("last"):
        return None
    m = _STEP_IN_NAME.search(stem)
    if m:
        return int(m.group(1))
    if "=" in stem:  # Lightning names without step=: the numbers are epochs and metrics
        return None
    m = _TRAILING.search(stem)
    return int(m.group(1)) if m else None


def name_metrics(name: str) -> Dict[str, float]:
    """Monitored values written in a Lightning name (``epoch=2-val_loss=0.02.ckpt``)."""
    out: Dict[str, float] = {}
    for k, v in _NAME_METRIC.findall(name_stem(name)):
        if k not in ("epoch", "step"):
            try:
                out[k] = float(v)
            except ValueError:
                continue
    return out


def series_key(c: Checkpoint) -> str:
    """Checkpoints of one series differ only in their numbers (rotation counts per series)."""
    return "{}|{}|{}".format(c.path.parent, c.kind, re.sub(r"\d+(\.\d+)?([eE][-+]?\d+)?", "#", c.name))


def folder_kind(p: Path) -> Optional[str]:
    name = p.name
    if _OWN_NAME.match(name):
        return "gpujob"
    if _DS_NAME.match(name):
        return "deepspeed"
    try:
        names = set(os.listdir(str(p)))
    except OSError:
        return None
    hf = HF_STATE in names or any(n.startswith("rng_state") and n.endswith(".pth") for n in names)
    acc = any(re.match(r"^random_states_\d+\.pkl$", n) for n in names)
    if HF_NAME.match(name):
        if acc and not hf:
            return "accelerate"
        # a Trainer's folder, even half written, holds its model's config (or training_args.bin) first;
        # a script's own checkpoint-<N>/ (model.pt renamed into place) is a generic folder checkpoint
        return "hf" if hf or names & HF_SIGNS or HF_INCOMPLETE in names else "folder"
    if hf:
        return "hf"
    if acc or _ACC_NAME.match(name):
        return "accelerate"
    return None


def classify(p: Path, by_pattern: bool) -> Optional[Checkpoint]:
    name = p.name
    if _TEMP.search(name):
        return None
    try:
        st = p.stat()  # follows a link (Lightning's last.ckpt may be one)
    except OSError:
        return None
    if p.is_dir():
        kind = folder_kind(p) or ("folder" if by_pattern else None)
        if kind is None:
            return None
        return Checkpoint(p, kind, step_of(p), tree_mtime(p, st.st_mtime), {})
    if not p.is_file() or SIDE_FILES.match(name):
        return None
    if name.endswith(".ckpt"):
        kind = "lightning"
    elif name.endswith(FILE_EXTS) or by_pattern:
        kind = "file"
    else:
        return None
    return Checkpoint(p, kind, step_of(p), st.st_mtime, name_metrics(name))


def tree_mtime(p: Path, own: float) -> float:
    """A folder's time: its own mtime or its newest direct entry's (files rewritten in place)."""
    newest = own
    try:
        for e in os.scandir(str(p)):
            try:
                newest = max(newest, e.stat(follow_symlinks=False).st_mtime)
            except OSError:
                continue
    except OSError:
        pass
    return newest
