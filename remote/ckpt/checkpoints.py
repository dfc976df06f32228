"""Checkpoints of every common kind: finding, ordering, completeness, rotation, the best one.

Standard library only, Python 3.8+, importable on its own (no relative imports): the agent
uses it to compute GPUJOB_RESUME, and the runtime helper imports it as ``gpujob_checkpoints``.

Kinds (docs/checkpoints.md has the user's version):

- ``hf``: a Hugging Face Trainer ``checkpoint-<N>/``. Complete when ``trainer_state.json``
  exists (the Trainer writes it last), the ``rng_state*.pth`` files are there (all ranks when
  the world size is known) and ``checkpoint-is-incomplete.txt`` is absent.
- ``folder``: a script's own ``checkpoint-<N>/`` without HF's files (or a folder a pattern names):
  complete when it holds files, each whole or settled, no job process writes in it, and it holds
  every file the folder before it in its series holds (a save cut short between two files).
- ``gpujob``: the runtime helper's ``step-<N>/``, written as ``.tmp-step-<N>/`` and renamed;
  complete when its marker ``.gpujob-complete`` (written last) exists.
- ``accelerate``: a ``save_state`` folder (``checkpoints/checkpoint_<n>`` with automatic
  naming, or any folder holding ``random_states_<rank>.pkl``): complete when the random
  states (written last) of ranks 0..max are whole archives and no job process writes in it.
- ``deepspeed``: ``global_step<N>/``: complete when the ``latest`` file beside it names it or
  a newer tag (DeepSpeed writes ``latest`` after the save) and no job process writes in it.
- ``lightning`` (``*.ckpt``) and ``file`` (``*.pt``, ``*.pth``, ``*.bin``, ``*.safetensors``,
  ``*.tar``): one file, complete when no job process has it open for writing (looked up while
  it changed within ``WRITE_WINDOW`` s) and its format
  says it is whole (a zip archive from ``torch.save`` has its central directory; a
  safetensors file is as long as its header says) or, for other formats, it has not changed
  for ``SETTLE`` seconds. A file written under a temporary name and renamed into place is
  complete as it appears: temporary names (``*.tmp``, ``*.part``, dot files) are never
  checkpoints.

Discovery walks ``FIND_DEPTH`` levels below the checkpoint folder (an image trainer's
``<output>/<experiment>/``); checkpoint-looking files elsewhere in the job's folders are strays
(``stray_paths``), a model saved at the end is an artifact (``artifacts``).

Order: within a series (names that differ only in their numbers) by the step in the name
(``checkpoint-N``, ``global_stepN``, ``step=N``, a trailing number); across series and for
names without a step (``last.ckpt``) by modification time.
"""

import json
import os
import re
import shutil
import struct
import time
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple, Union

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
_HF_NAME = re.compile(r"^checkpoint-(\d+)$")
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


class Checkpoint(object):
    """One checkpoint: a folder (folder kinds) or a file (``lightning``, ``file``)."""

    __slots__ = ("path", "kind", "step", "mtime", "metrics", "complete", "reason")

    def __init__(self, path: Path, kind: str, step: Optional[int], mtime: float, metrics: Dict[str, float]) -> None:
        self.path, self.kind, self.step, self.mtime, self.metrics = path, kind, step, mtime, metrics
        self.complete = False  # type: bool
        self.reason = None  # type: Optional[str]  # why it is not complete (when checked)

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

    def as_dict(self, base: PathLike) -> Dict[str, Any]:
        d = {"name": self.rel(base), "kind": self.kind, "step": self.step, "complete": self.complete,
             "mtime": round(self.mtime, 3), "metrics": self.metrics}  # type: Dict[str, Any]
        if not self.complete and self.reason:
            d["incomplete_reason"] = self.reason
        return d

    def __repr__(self) -> str:
        return "Checkpoint({}, {}, step={}, complete={})".format(self.path, self.kind, self.step, self.complete)


# ---- names ------------------------------------------------------------------------------
def _stem(name: str) -> str:
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
    for rx in (_HF_NAME, _OWN_NAME, _ACC_NAME, _DS_NAME):
        m = rx.match(name)
        if m:
            return int(m.group(1))
    stem = _stem(name)
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
    out = {}  # type: Dict[str, float]
    for k, v in _NAME_METRIC.findall(_stem(name)):
        if k not in ("epoch", "step"):
            try:
                out[k] = float(v)
            except ValueError:
                continue
    return out


def _series(c: Checkpoint) -> str:
    """Checkpoints of one series differ only in their numbers (rotation counts per series)."""
    return "{}|{}|{}".format(c.path.parent, c.kind, re.sub(r"\d+(\.\d+)?([eE][-+]?\d+)?", "#", c.name))


# ---- what a path is ---------------------------------------------------------------------
def _folder_kind(p: Path) -> Optional[str]:
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
    if _HF_NAME.match(name):
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


def _classify(p: Path, by_pattern: bool) -> Optional[Checkpoint]:
    name = p.name
    if _TEMP.search(name):
        return None
    try:
        st = p.stat()  # follows a link (Lightning's last.ckpt may be one)
    except OSError:
        return None
    if p.is_dir():
        kind = _folder_kind(p) or ("folder" if by_pattern else None)
        if kind is None:
            return None
        return Checkpoint(p, kind, step_of(p), _tree_mtime(p, st.st_mtime), {})
    if not p.is_file() or SIDE_FILES.match(name):
        return None
    if name.endswith(".ckpt"):
        kind = "lightning"
    elif name.endswith(FILE_EXTS) or by_pattern:
        kind = "file"
    else:
        return None
    return Checkpoint(p, kind, step_of(p), st.st_mtime, name_metrics(name))


def _tree_mtime(p: Path, own: float) -> float:
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
    found = []  # type: List[Path]
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
                    (follow or not p.is_symlink()) and _folder_kind(p) is None and not _HF_NAME.match(n):
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
    seen = set()  # type: Set[Path]
    found = []  # type: List[Checkpoint]
    for p in _candidates(base, pattern):
        if p in seen:
            continue
        seen.add(p)
        c = _classify(p, bool(pattern))
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
        _check(found, _writers(found, base, pids))
    return found


_CKPT_WORD = re.compile(r"ckpt|checkpoint|last|best|epoch|step", re.I)


def _in_checkpoint_folders(found: List[Checkpoint], base: Path) -> List[Checkpoint]:
    """Single files below the checkpoint folder's own level count where their folder holds checkpoints
    (an image trainer's ``<experiment>/checkpoint-N.pth.tar``, ``last.pth.tar``): a name with a step or
    a checkpoint word. A final model saved into a subfolder (``final/model.safetensors``) does not."""
    home = {base, base / "checkpoints"}
    ok = {}  # type: Dict[Path, bool]
    for c in found:
        parent = c.path.parent
        if not c.is_dir and parent not in home and parent.name != "checkpoints":
            ok[parent] = ok.get(parent, False) or c.step is not None or bool(_CKPT_WORD.search(_stem(c.name)))
    return [c for c in found if c.is_dir or ok.get(c.path.parent, True)]


def _writers(found: List[Checkpoint], base: Path, pids: Any) -> Set[str]:
    """Files open for writing under ``base``, looked up only when a kind needs it and something
    of that kind changed within ``WRITE_WINDOW`` s (every tick would read every process's fds)."""
    recent = time.time() - WRITE_WINDOW
    if not any(c.kind not in ("hf", "gpujob") and c.mtime >= recent for c in found):
        return set()
    return open_for_writing(pids, [str(base.resolve())])


def _check(found: List[Checkpoint], writing: Set[str]) -> None:
    now = time.time()
    for c in found:
        c.complete = _complete(c, writing, now)
        c.reason = None if c.complete else incomplete_reason(c, writing, now)
    before = {}  # type: Dict[str, Checkpoint]
    for c in found:  # oldest first: each script folder against the one before it in its series
        if c.kind != "folder":
            continue
        prev = before.get(_series(c))
        before[_series(c)] = c
        if c.complete and prev is not None:
            c.reason = _lacks(c.path, prev.path)
            c.complete = not c.reason


def _files(p: Path) -> Dict[str, str]:
    """The folder's file names by their shape, numbers as ``#`` (``model_4.pt`` in ``checkpoint-4``
    is ``model_3.pt`` in ``checkpoint-3``)."""
    try:
        return {re.sub(r"\d+", "#", str(f.relative_to(p))): str(f.relative_to(p)) for f in p.rglob("*") if f.is_file()}
    except OSError:
        return {}


def _lacks(p: Path, prev: Path) -> Optional[str]:
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
    if _written_in(p, writing):
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
    if _zip_whole(p) is False or p.name.endswith(".safetensors"):
        return "cut short (its format is not whole: a write was killed or interrupted?)"
    return "changed within the last {:g} s".format(SETTLE)


def _ordered(found: List[Checkpoint]) -> List[Checkpoint]:
    """Oldest first. Within a series (names differing only in their numbers) the step in the name
    decides; across series, whose numbers need not compare (accelerate counts saves, Lightning
    steps), and for names without a step, the time does. A series' times are made monotone along
    its steps, so that both rules agree."""
    eff = {}  # type: Dict[int, float]
    series = {}  # type: Dict[str, List[Checkpoint]]
    for c in found:
        if c.step is not None:
            series.setdefault(_series(c), []).append(c)
    for group in series.values():
        t = float("-inf")
        for c in sorted(group, key=lambda c: (c.step, c.mtime, c.name)):
            t = max(t, c.mtime)
            eff[id(c)] = t
    return sorted(found, key=lambda c: (eff.get(id(c), c.mtime), -1 if c.step is None else c.step, c.name))


# ---- being written ----------------------------------------------------------------------
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


def _written_in(path: Path, writing: Set[str]) -> bool:
    if not writing:
        return False
    real = str(path.resolve())
    return real in writing or any(w.startswith(real + "/") for w in writing)


# ---- complete ---------------------------------------------------------------------------
def _zip_whole(path: Path) -> Optional[bool]:
    """True/False for a zip archive (torch.save's format) with/without all it needs; None when the file
    is no zip archive at all. A torch archive must also hold every tensor its ``data.pkl`` names:
    torch.save interrupted by an exception (KeyboardInterrupt from a stop's SIGINT, a full disk) still
    writes the central directory on its way out, so the zip reads whole and ``torch.load`` fails."""
    try:
        st = path.stat()
        with open(str(path), "rb") as f:
            if f.read(4) != b"PK\x03\x04":
                return None
    except OSError:
        return False
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key in _ZIP_SEEN:
        return _ZIP_SEEN[key]
    try:
        with zipfile.ZipFile(str(path)) as z:
            whole = _torch_records_whole(z) is not False
    except (OSError, zipfile.BadZipFile, ValueError, EOFError, RuntimeError, NotImplementedError):
        whole = False
    if len(_ZIP_SEEN) >= 256:
        _ZIP_SEEN.clear()
    _ZIP_SEEN[key] = whole
    return whole


_ZIP_SEEN = {}  # type: Dict[Tuple[str, int, int], bool]  # (path, size, mtime): the agent's serve asks often
PICKLE_MAX = 64 << 20  # a data.pkl larger than this is not read (trusted as the zip says)


class _Anything(object):
    """Stands for every class a torch pickle names: nothing of the file is imported or run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> "_Anything":
        return _Anything()

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass


def _torch_records_whole(z: zipfile.ZipFile) -> Optional[bool]:
    """Whether a torch.save archive holds ``data/<key>`` for every storage its ``data.pkl`` names (its
    records are written after data.pkl); None for a zip that is no torch archive or a pickle not read."""
    import pickle

    names = set(z.namelist())
    pkl = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if not pkl:  # torch's end of file without its pickle: interrupted before the first record
        return False if any(n.endswith("/.data/serialization_id") for n in names) else None
    info = z.getinfo(pkl[0])
    if info.file_size > PICKLE_MAX:
        return None
    keys = []  # type: List[str]

    class Reader(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            return _Anything

        def persistent_load(self, pid: Any) -> Any:
            if isinstance(pid, tuple) and len(pid) > 2 and pid[0] == "storage":
                keys.append(str(pid[2]))
            return _Anything()

    import io

    try:
        Reader(io.BytesIO(z.read(pkl[0]))).load()
    except Exception:  # noqa: BLE001 - an odd pickle is not judged here
        return None
    root = pkl[0][: -len("data.pkl")]
    return all(root + "data/" + k in names for k in keys)


def _safetensors_whole(path: Path, size: int) -> Optional[bool]:
    """A safetensors file is whole when it is as long as its JSON header says."""
    try:
        with open(str(path), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            if n <= 0 or n > 100 << 20:
                return False
            header = json.loads(f.read(n).decode("utf-8"))
    except (OSError, ValueError, struct.error, UnicodeDecodeError):
        return False
    end = 0
    for k, v in header.items():
        if k != "__metadata__" and isinstance(v, dict):
            end = max(end, int((v.get("data_offsets") or [0, 0])[1]))
    return size == 8 + n + end


def file_whole(path: Path, now: Optional[float] = None) -> bool:
    """Whether a single checkpoint file is whole by its format (or, unknown, unchanged for SETTLE s)."""
    try:
        st = path.stat()
    except OSError:
        return False
    if st.st_size == 0:
        return False
    z = _zip_whole(path)
    if z is not None:
        return z
    if path.name.endswith(".safetensors"):
        return bool(_safetensors_whole(path, st.st_size))
    return (now if now is not None else time.time()) - st.st_mtime >= SETTLE


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
    ranks = {}  # type: Dict[int, Path]
    for f in p.glob("random_states_*.pkl"):
        m = re.match(r"^random_states_(\d+)\.pkl$", f.name)
        if m:
            ranks[int(m.group(1))] = f
    if not ranks or set(ranks) != set(range(max(ranks) + 1)):
        return False
    return all(_zip_whole(f) is not False for f in ranks.values())


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


def _complete(c: Checkpoint, writing: Set[str], now: float, world_size: Optional[int] = None) -> bool:
    p = c.path
    if c.kind == "gpujob":
        return (p / COMPLETE_MARKER).is_file()
    if c.kind == "hf":
        if not (p / HF_STATE).is_file() or (p / HF_INCOMPLETE).exists():
            return False
        return _rng_complete(p, world_size)
    if _written_in(p, writing):
        return False
    if c.kind == "accelerate":
        return _accelerate_complete(p)
    if c.kind == "deepspeed":
        return _deepspeed_complete(p)
    if c.kind == "folder":
        return _settled_folder(p, now)
    return file_whole(p, now)


def is_complete(path: PathLike, world_size: Optional[int] = None, pids: Any = None) -> bool:
    """True when the checkpoint (folder or file) at ``path`` was fully written.

    ``world_size`` (the number of training processes), when known, makes the Trainer check
    exact: every ``rng_state_<rank>.pth`` must be there. ``pids``: see ``find``.
    """
    p = Path(path)
    c = _classify(p, by_pattern=True)
    if c is None:
        return False
    writing = set() if c.kind in ("gpujob", "hf") else open_for_writing(pids, [str(p.parent.resolve())])
    if c.kind == "folder" and _complete(c, writing, time.time(), world_size):
        earlier = [(q.step, q.path) for q in (_classify(x, True) for x in p.parent.iterdir() if x.is_dir() and x != p)
                   if q is not None and q.kind == "folder" and _series(q) == _series(c)
                   and q.step is not None and c.step is not None and q.step < c.step]
        return not earlier or _lacks(p, max(earlier)[1]) is None
    return _complete(c, writing, time.time(), world_size)


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


# ---- the best one -----------------------------------------------------------------------
BEST_NAME = re.compile(r"^(model[_-])?best([_-](model|checkpoint|ckpt))?$", re.I)  # a best kept by the script


def metric_mode(metric: str) -> str:
    """'min' for losses and errors, 'max' for the rest (accuracy, f1, bleu...)."""
    return "min" if re.search(r"loss|perplexity|ppl|error|wer|cer|mse|mae|rmse", metric) else "max"


def _hf_best(complete: List[Checkpoint]) -> Optional[Checkpoint]:
    for c in reversed(complete):
        if c.kind != "hf":
            continue
        try:
            with open(str(c.path / HF_STATE)) as f:
                best = json.load(f).get("best_model_checkpoint")
        except (OSError, ValueError):
            continue
        if best:
            name = os.path.basename(str(best).rstrip("/"))
            for q in complete:
                if q.name == name:
                    return q
    return None


def _by_name_metric(complete: List[Checkpoint], metric: str) -> Optional[Checkpoint]:
    scored = [c for c in complete if metric in c.metrics]
    if not scored:
        return None
    sign = 1.0 if metric_mode(metric) == "min" else -1.0
    return min(reversed(scored), key=lambda c: sign * c.metrics[metric])


def metric_history(job_path: Optional[Path], complete: List[Checkpoint], metric: str) -> Dict[int, float]:
    """step -> value of ``metric`` from metrics.jsonl, else from the newest trainer_state.json's log."""
    scores = {}  # type: Dict[int, float]
    if job_path is not None:
        try:
            with open(str(job_path / "metrics.jsonl")) as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(rec, dict) and isinstance(rec.get(metric), (int, float)) and \
                            isinstance(rec.get("step"), (int, float)):
                        scores[int(rec["step"])] = float(rec[metric])
        except OSError:
            pass
    if scores:
        return scores
    for c in reversed(complete):
        if c.kind == "hf":
            try:
                with open(str(c.path / HF_STATE)) as f:
                    log = json.load(f).get("log_history") or []
            except (OSError, ValueError):
                continue
            for rec in log:
                if isinstance(rec, dict) and isinstance(rec.get(metric), (int, float)) and "step" in rec:
                    scores[int(rec["step"])] = float(rec[metric])
            break
    return scores


def best(found: List[Checkpoint], metric: Optional[str] = None, job_path: Optional[Path] = None
         ) -> Optional[Checkpoint]:
    """The best complete checkpoint: with no ``metric``, trainer_state.json's best_model_checkpoint,
    else the newest the script named best (``model_best.pth.tar``), else the one monitored value all
    names carry, else ``eval_loss`` (or ``val_loss``, ``test_loss``); a metric is looked up in the
    names first, then in the history (metrics.jsonl, trainer_state.json) at each one's step."""
    complete = [c for c in found if c.complete]
    if not complete:
        return None
    guessed = not metric
    if not metric:
        hf = _hf_best(complete)
        if hf is not None:
            return hf
        kept = [c for c in complete if BEST_NAME.match(_stem(c.name))]
        if kept:  # the script keeps its best itself (an image trainer's model_best.pth.tar, best.pt)
            return kept[-1]
        keys = set()  # type: Set[str]
        for c in complete:
            keys.update(c.metrics)
        metric = sorted(keys)[0] if len(keys) == 1 else "eval_loss"
    named = _by_name_metric(complete, metric)
    if named is not None:
        return named
    scores = metric_history(job_path, complete, metric)
    for other in ("val_loss", "test_loss") if guessed and not scores else ():  # what a log calls it
        scores = metric_history(job_path, complete, other)
        if scores:
            metric = other
            break
    if not scores:
        return None
    sign = 1.0 if metric_mode(metric) == "min" else -1.0
    ranked = []
    for c in complete:
        if c.step is None:
            continue
        at = [k for k in scores if k <= c.step]
        if at:
            ranked.append((sign * scores[max(at)], -c.step, c.name, c))
    if not ranked:
        return None
    ranked.sort(key=lambda t: t[:3])
    return ranked[0][3]


# ---- rotation ---------------------------------------------------------------------------
def _protected(found: List[Checkpoint], protect: Iterable[PathLike]) -> Set[Path]:
    """What rotation never deletes: the newest complete checkpoint, ``protect`` (the one being
    resumed), Lightning's last*.ckpt (and what a last link points at), the best ones."""
    keep = set()  # type: Set[Path]
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
    hf = _hf_best(complete)
    if hf is not None:
        keep.add(hf.path)
    by_series = {}  # type: Dict[str, List[Checkpoint]]
    for c in complete:
        if c.metrics:
            by_series.setdefault(_series(c), []).append(c)
    for group in by_series.values():
        for m in set(k for c in group for k in c.metrics):
            b = _by_name_metric(group, m)
            if b is not None:
                keep.add(b.path)
    return keep


def _remove(p: Path) -> None:
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
    writing = _writers(found, base, pids) if found else set()
    _check(found, writing)
    complete = [c for c in found if c.complete]
    if not complete:
        return []
    safe = _protected(found, protect)
    safe |= {p.resolve() for p in safe}
    now = time.time()
    doomed = []  # type: List[Checkpoint]
    series = {}  # type: Dict[str, List[Checkpoint]]
    for c in complete:
        if c.step is not None:
            series.setdefault(_series(c), []).append(c)
    for group in series.values():
        doomed += group[:-keep]
    newest = complete[-1]
    order = {id(c): i for i, c in enumerate(found)}
    for c in found:
        if not c.complete and order[id(c)] < order[id(newest)] and now - c.mtime >= STALE:
            doomed.append(c)
    deleted = []  # type: List[Path]
    for c in doomed:
        if c.path in safe or c.path.resolve() in safe or _written_in(c.path, writing):
            continue
        _remove(c.path)
        deleted.append(c.path)
    newest_step = max([c.step for c in complete if c.kind == "gpujob" and c.step is not None] or [-1])
    for tmp in base.glob(".tmp-step-*"):
        m = re.match(r"^\.tmp-step-(\d+)$", tmp.name)
        if m and int(m.group(1)) < newest_step and \
                now - _tree_mtime(tmp, tmp.stat().st_mtime) >= STALE and not _written_in(tmp, writing):
            shutil.rmtree(str(tmp), ignore_errors=True)
            deleted.append(tmp)
    return sorted(deleted, key=lambda q: (step_of(q.name.replace(".tmp-", "", 1)) or 0, q.name))


# ---- checkpoints gpujob does not watch --------------------------------------------------
STRAY_SKIP = {"__pycache__", "node_modules", "site-packages", "wandb", "mlruns", "venv", "env", "data", "datasets"}
STRAY_DEPTH, STRAY_ENTRIES = 4, 5000
ARTIFACT_EXTS = (".pt", ".pth", ".safetensors", ".bin")
ARTIFACT_MIN = 1 << 20  # a final model file is at least this big (smaller ones are configs, tokens)


def _looks_periodic(c: Checkpoint) -> bool:
    """What a stray report is about: checkpoints a run writes as it goes (a step in the name, a folder
    kind, Lightning's files), not the one model file a script saves at its end (an artifact)."""
    return c.step is not None or c.is_dir or c.kind == "lightning"


def _walk_classified(base: Path, depth: int, since: float) -> Iterable[Any]:
    """(folder relative to ``base``, Checkpoint) for each checkpoint-looking entry newer than
    ``since`` up to ``depth`` folders below ``base``; links are not followed (``checkpoint.dir``'s own)."""
    seen = 0
    for top, dirs, files in os.walk(str(base)):
        rel = Path(top).relative_to(base)
        dirs[:] = [] if len(rel.parts) >= depth else \
            sorted(d for d in dirs if not d.startswith(".") and d not in STRAY_SKIP)
        seen += len(dirs) + len(files)
        if seen > STRAY_ENTRIES:
            return
        inside = []  # checkpoint folders are reported, not walked into
        for name in sorted(dirs) + sorted(files):
            if os.path.islink(os.path.join(top, name)):
                continue  # checkpoint.dir's link, a last.ckpt link: what they lead to is looked at where it is
            c = _classify(Path(top) / name, by_pattern=False)
            if c is not None:
                if c.is_dir:
                    inside.append(name)
                if c.mtime >= since:
                    yield rel, c
        dirs[:] = [d for d in dirs if d not in inside]


def stray_paths(code: PathLike, since: float, ckpt: Optional[PathLike] = None,
                pattern: Optional[str] = None) -> List[Path]:
    """Checkpoints the job wrote since ``since`` outside the places discovery uses: anywhere in the code
    folder (an HF ``output_dir="out"``, Lightning's default ``lightning_logs/``) and in the checkpoint
    folder deeper than ``FIND_DEPTH`` (or outside ``pattern``). Bounded; a hint for status, pull, the log."""
    known = set()  # type: Set[str]
    out = []  # type: List[Path]
    places = [Path(code)]
    inside = ""  # the checkpoint folder when it lies in the code (checkpoint.dir: a folder of it): its own walk
    if ckpt is not None and Path(ckpt).is_dir():
        known = {os.path.realpath(str(c.path)) for c in find(ckpt, pattern, check=False)}
        if os.path.realpath(str(ckpt)) != os.path.realpath(str(code)):
            places.append(Path(ckpt).resolve())
            inside = os.path.realpath(str(ckpt))
    for base in places:
        if not base.is_dir():
            continue
        for _rel, c in _walk_classified(base, STRAY_DEPTH + (FIND_DEPTH if base != places[0] else 0), since):
            real = os.path.realpath(str(c.path))
            if base == places[0] and inside and (real == inside or real.startswith(inside + "/")):
                continue
            if _looks_periodic(c) and real not in known and not any(real.startswith(k + "/") for k in known):
                out.append(c.path)
    return out


def stray_dir(code: PathLike, since: float, ckpt: Optional[PathLike] = None,
              pattern: Optional[str] = None) -> Optional[str]:
    """The folder (relative to ``code``, or ``$GPUJOB_CKPT_DIR/...`` below the checkpoint folder) where the
    job wrote checkpoints since ``since`` that gpujob does not watch, as the job file would name it;
    None when there is none."""
    for p in stray_paths(code, since, ckpt, pattern):
        base = Path(code)
        try:
            parts = p.parent.relative_to(base).parts
            prefix = ""
        except ValueError:
            parts = p.parent.relative_to(Path(ckpt).resolve()).parts if ckpt is not None else p.parent.parts
            prefix = "$GPUJOB_CKPT_DIR/"
        # Lightning's <root>/version_N/checkpoints/: the folder above version_N is what gpujob reads
        for i, part in enumerate(parts):
            if re.match(r"^version_\d+$", part):
                parts = parts[:i]
                break
        return prefix + ("/".join(parts) or ".")
    return None


def stray_advice(rel: str) -> str:
    """What to write in the job file for checkpoints found in ``rel``."""
    if rel.startswith("$GPUJOB_CKPT_DIR/"):
        sub = rel[len("$GPUJOB_CKPT_DIR/"):]
        return ("the script writes checkpoints to {}/, deeper than gpujob looks ({} folders below $GPUJOB_CKPT_DIR): "
                "add checkpoint: {{pattern: '{}/*'}} to the job file (its files' names), so restarts resume from "
                "them and status, rotation and pull see them").format(rel, FIND_DEPTH, sub)
    how = "checkpoint: {{dir: {}}}".format(rel) if rel != "." else \
        "checkpoint: {dir: ., pattern: 'NAME_*.pt'} (the files' names)"
    return ("the script writes checkpoints to {}/ in its code folder, where gpujob does not look: add {} "
            "to the job file, so restarts resume from them and status, rotation and pull see them"
            ).format(rel, how)


def artifacts(code: PathLike, since: float, ckpt: Optional[PathLike] = None, pattern: Optional[str] = None,
              limit: int = 20) -> List[Dict[str, Any]]:
    """Model files (``*.pt``, ``*.pth``, ``*.safetensors``, ``*.bin`` of 1 MiB or more) the job wrote
    in its code folder since ``since`` that are no periodic checkpoint (``mnist_cnn.pt`` saved at the
    end): {name (relative to ``code``), bytes, mtime}, newest first. Links are not followed."""
    out = []  # type: List[Dict[str, Any]]
    known = {os.path.realpath(str(c.path)) for c in find(ckpt, pattern, check=False)} if ckpt is not None else set()
    for rel, c in _walk_classified(Path(code), STRAY_DEPTH, since):
        if c.is_dir or not c.name.endswith(ARTIFACT_EXTS) or c.step is not None or \
                os.path.realpath(str(c.path)) in known:
            continue
        try:
            size = c.path.stat().st_size
        except OSError:
            continue
        if size >= ARTIFACT_MIN:
            out.append({"name": (rel / c.name).as_posix(), "bytes": size, "mtime": round(c.mtime, 3)})
    return sorted(out, key=lambda a: -a["mtime"])[:limit]
