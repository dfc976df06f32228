"""Checkpoints gpujob does not watch: ones the job wrote outside the places discovery looks (with the
line to add to the job file), and the model files a script saved at its end (artifacts)."""

import os
import re
from pathlib import Path
from typing import Any, Iterable, List, Optional, Set, TypedDict

from .discovery import FIND_DEPTH, find
from .kinds import Checkpoint, PathLike, classify

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
            c = classify(Path(top) / name, by_pattern=False)
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
    known: Set[str] = set()
    out: List[Path] = []
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


class Artifact(TypedDict):
    """A model file the job saved in its code folder that is no checkpoint (``artifacts``)."""
    name: str  # relative to the code folder
    bytes: int
    mtime: float


def artifacts(code: PathLike, since: float, ckpt: Optional[PathLike] = None, pattern: Optional[str] = None,
              limit: int = 20) -> List["Artifact"]:
    """Model files (``*.pt``, ``*.pth``, ``*.safetensors``, ``*.bin`` of 1 MiB or more) the job wrote
    in its code folder since ``since`` that are no periodic checkpoint (``mnist_cnn.pt`` saved at the
    end): {name (relative to ``code``), bytes, mtime}, newest first. Links are not followed."""
    out: List[Artifact] = []
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
