"""Where a job's checkpoints are (``<job>/ckpt``, shared storage, or a folder in its code) and which
one an attempt resumes from."""

import os
import shutil
from pathlib import Path
from typing import Any, Optional

from remote.core.layout import JobDir
from remote.core.spec import JobSpec


def checkpoints():  # type: ignore[no-untyped-def]
    """remote/ckpt/checkpoints.py, loaded when first needed."""
    from remote.ckpt import checkpoints

    return checkpoints


def latest_resume(ckpt_dir: Path, pattern: Optional[str] = None, pids: Any = None) -> str:
    """The newest complete checkpoint (a folder, or the file itself for single-file kinds), or ''
    (what GPUJOB_RESUME holds)."""
    try:
        found = checkpoints().latest_complete(ckpt_dir, pattern, pids)
    except ImportError:
        return ""
    return str(found) if found else ""


def why_from_start(ckpt_dir: Path, pattern: Optional[str] = None) -> str:
    """Why an attempt starts without GPUJOB_RESUME though checkpoints are there (a GPT trainer's one
    ckpt.pt cut short by a kill while it was overwritten): the newest incomplete ones and their reasons."""
    try:
        bad = [c for c in checkpoints().find(ckpt_dir, pattern) if not c.complete]
    except ImportError:
        return ""
    if not bad:
        return ""
    return " from the beginning: no complete checkpoint to resume from ({})".format(
        "; ".join("{}: {}".format(c.rel(ckpt_dir), c.reason) for c in bad[-3:]))


def _shared(rel: Optional[str]) -> bool:
    return bool(rel) and (rel.startswith("/") or rel.startswith("~"))  # type: ignore[union-attr]


def ckpt_dir(job: JobDir, spec: JobSpec) -> Path:
    """``<job>/ckpt``, or ``<checkpoint.dir>/<job id>`` on shared storage (multi-node).

    A relative ``checkpoint.dir`` is a folder the script writes in its code: that folder
    becomes a link to ``<job>/ckpt`` (see link_code_dir)."""
    shared = spec.checkpoint.dir
    if not shared or not _shared(shared):
        return job.ckpt
    path = Path(os.path.expanduser(shared)) / job.id
    if not os.path.lexists(str(job.ckpt)):
        path.mkdir(parents=True, exist_ok=True)
        os.symlink(str(path), str(job.ckpt))  # status and pull see it as <job>/ckpt
    return path


def link_in_code(job: JobDir, spec: JobSpec) -> None:
    """Before an attempt: a relative ``checkpoint.dir`` links ``<job>/ckpt`` with the code."""
    rel = spec.checkpoint.dir
    if rel and not _shared(rel):
        if Path(rel).parts:
            link_code_dir(job, rel)
        else:
            link_ckpt_to_code(job)


def link_code_dir(job: JobDir, rel: str) -> None:
    """Make ``<job>/ckpt`` a link to ``<job>/code/<rel>``, a real folder: the script may
    ``shutil.rmtree`` it (a link there failed every attempt: "Cannot call rmtree on a symbolic
    link") and make it again, and ``<job>/ckpt`` still leads to what it writes, where restarts,
    ``resume``, status, rotation and pull find it. What an earlier ``ckpt/`` held (a move
    brought it) goes into the folder first. A job started with the older, opposite link
    (``code/<rel>`` -> ``ckpt``) keeps it."""
    ckpt, out = job.ckpt, job.code / rel
    if out.is_symlink():
        return
    if os.path.lexists(str(out)) and not out.is_dir():
        raise OSError("checkpoint.dir {} is a file in the code, not a folder".format(rel))
    out.mkdir(parents=True, exist_ok=True)  # again, if the script removed it
    if ckpt.is_symlink():
        return
    _move_into(ckpt, out)
    os.symlink(os.path.relpath(str(out), str(ckpt.parent)), str(ckpt))


def link_ckpt_to_code(job: JobDir) -> None:
    """``checkpoint.dir: .`` (the script saves into its working folder): ``<job>/ckpt`` becomes a
    link to the code, so resume, status, rotation and pull see those files (the spec's pattern
    says which). What an earlier ``ckpt/`` held (a move brought it) goes into the code first."""
    ckpt = job.ckpt
    if ckpt.is_symlink():
        return
    _move_into(ckpt, job.code)
    os.symlink("code", str(ckpt))


def _move_into(ckpt: Path, dest: Path) -> None:
    """What a real ``ckpt/`` folder holds goes into ``dest`` (what is there already wins); the folder goes."""
    if ckpt.is_dir():
        for entry in sorted(os.listdir(str(ckpt))):
            if not os.path.lexists(str(dest / entry)):
                os.rename(str(ckpt / entry), str(dest / entry))
        shutil.rmtree(str(ckpt))
