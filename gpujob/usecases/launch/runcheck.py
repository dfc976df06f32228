"""Before a submit: the script that ``run:`` names is in the project folder that is synced.

``run: python trian.py`` would otherwise be uploaded, provisioned and started, to fail with
"can't open file" on a rented GPU. Only a plain relative ``.py``/``.sh`` path is judged (the
first one in the command); a command that changes folder, or a name built from variables or
globs, is left to run.
"""

from __future__ import annotations

import difflib
import shlex
from pathlib import Path

from gpujob.errors import SpecError

SCRIPT_SUFFIXES = (".py", ".sh")


def named_script(run: str) -> str | None:
    """The first script path ``run`` names, or None when there is none to judge."""
    try:
        words = shlex.split(run, comments=True)
    except ValueError:
        return None
    if any(w in ("cd", "pushd") for w in words):
        return None
    for w in words:
        if w.endswith(SCRIPT_SUFFIXES) and not w.startswith(("-", "/", "~")) and not any(c in w for c in "=$`*?"):
            return w
    return None


def check_script(run: str, workdir: str | Path, source: str = "job.yaml") -> None:
    """``SpecError`` naming the files that do exist when ``run``'s script is not under ``workdir``."""
    script = named_script(run)
    if script is None:
        return
    top = Path(workdir)
    if (top / script).is_file():
        return
    have = sorted(str(p.relative_to(top)) for p in _scripts(top))
    close = difflib.get_close_matches(script, have, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]}? " if close else ""
    listed = ", ".join(have[:12]) + (f" and {len(have) - 12} more" if len(have) > 12 else "") if have else "no script"
    raise SpecError(f"{source}: run: {script} is not in the project folder {top}: nothing was submitted",
                    f"{hint}the folder holds {listed}; fix run: in {source}")


def _scripts(top: Path, depth: int = 2) -> list[Path]:
    out: list[Path] = []
    try:
        entries = sorted(top.iterdir())
    except OSError:
        return out
    for p in entries:
        if p.name.startswith("."):
            continue
        if p.is_file() and p.suffix in SCRIPT_SUFFIXES:
            out.append(p)
        elif p.is_dir() and depth > 1 and not p.is_symlink():
            out += _scripts(p, depth - 1)
    return out
