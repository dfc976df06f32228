"""A ``workdir`` that is the home folder, or far larger than a project, is refused (``--force``).

A job file saved in the home folder made the whole home the job's code: every document, and
the credentials the exclusion layer knows and those it cannot know about."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpujob.errors import SpecError

MAX_FILES = 100_000
MAX_BYTES = 20 << 30


def _limits() -> tuple[int, int]:
    return (int(os.environ.get("GPUJOB_WORKDIR_MAX_FILES", MAX_FILES)),
            int(float(os.environ.get("GPUJOB_WORKDIR_MAX_GB", MAX_BYTES / 2**30)) * 2**30))


def _remedy(spec: Any) -> str:
    return (f"move the job file into the project's folder, or set workdir: (in {spec.source}) to it, "
            "e.g. workdir: ./myproject; --force sends it anyway (keys and credentials are still never sent); nothing was sent")


def check_home(spec: Any, force: bool) -> None:
    """Refuse a workdir that is the home folder or holds it, naming what it would have sent."""
    if force:
        return
    work = Path(os.path.realpath(spec.workdir))
    home = Path(os.path.realpath(Path.home()))
    if work != home and work not in home.parents:
        return
    try:
        names = sorted(e.name + ("/" if e.is_dir() else "") for e in os.scandir(work))
    except OSError:
        names = []
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    raise SpecError(f"workdir {work} is {'your home folder' if work == home else 'above your home folder'}: "
                    f"submit would upload all of it ({shown or 'everything in it'})", _remedy(spec))


def check_size(tree: Any, spec: Any, force: bool) -> None:
    """Refuse a scanned code tree (a sync ``LocalTree``) of more files or bytes than a project holds."""
    if force or tree.lazy or tree.delta is not None:  # unchanged or changed in part since an accepted sync
        return
    max_files, max_bytes = _limits()
    n = len(tree.files)
    size = sum(v[0] for v in tree.files.values())
    if n <= max_files and size <= max_bytes:
        return
    by_top: dict[str, int] = {}
    for r, v in tree.files.items():
        top = r.partition("/")[0]
        by_top[top] = by_top.get(top, 0) + v[0]
    biggest = sorted(by_top, key=lambda t: -by_top[t])[:5]
    raise SpecError(f"workdir {tree.top} holds {n:,} files ({size / 1e9:.1f} GB): more than a project's code "
                    f"(at most {max_files:,} files, {max_bytes / 2**30:.0f} GB); the largest parts: {', '.join(biggest)}",
                    "exclude what the job does not need (exclude: in the job file, .gpujobignore), put datasets under data:, or "
                    + _remedy(spec))
