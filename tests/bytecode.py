"""Bytecode for every Python process the tests start, cached once per run outside the trees tests read.

A dev image may set ``PYTHONDONTWRITEBYTECODE`` (this project's does): then each of the thousands of
``gpujob`` commands and local agents a run starts compiles its modules from source again, about a third
of a command's CPU (0.34 s against 0.22 s for a status's imports) — on CI's two cores, minutes. A user's
install has its bytecode (pip compiles it), so the tests should too. ``PYTHONPYCACHEPREFIX`` puts it in
one folder per run, keyed by source path, so no ``__pycache__`` appears in a job's code, a synced
project or the checkout: what a test lists, syncs or pulls is unchanged.

A prefix hides the bytecode the interpreter's install and pip already wrote (``__pycache__`` beside the
sources): torch, transformers, Lightning and MLflow would be compiled again in every run, by each of the
first workers that imports them at once (15 s of CPU a set). The folder starts with hard links to those
files (Python checks each against its source's size and time, and replaces, never rewrites, a stale one).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from gpujob.bundle import import_remote

pid_alive = import_remote("core.procs").pid_alive  # the agent's own liveness check

MARK = "GJ_TEST_PYCACHE"  # set by the run's first process; xdist workers inherit it and the folder


def _drop_dead_runs(tmp: Path) -> None:
    """Folders of earlier runs that were killed before they could remove their own."""
    for d in tmp.glob("gj-pycache-*"):
        m = re.match(r"gj-pycache-(\d+)-", d.name)
        if m and not pid_alive(int(m.group(1))):
            shutil.rmtree(d, ignore_errors=True)


def _link_installed(prefix: str) -> None:
    """Hard links in ``prefix``'s layout to the standard library's and site-packages' bytecode."""
    tag = f".{sys.implementation.cache_tag}.pyc"
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")}
    for root in sorted(roots):
        for folder, _dirs, files in os.walk(root):
            if os.path.basename(folder) != "__pycache__":
                continue
            into = prefix + os.path.dirname(folder)  # the prefix keeps the source's folder, without __pycache__
            os.makedirs(into, exist_ok=True)
            for name in files:
                if name.endswith(tag):  # not the -O variants
                    try:
                        os.link(os.path.join(folder, name), os.path.join(into, name))
                    except OSError:
                        return  # another file system, or links refused: compiling as before is correct


def share_bytecode() -> None:
    if os.environ.get(MARK) or os.environ.get("PYTHONPYCACHEPREFIX"):
        return  # a worker of this run, or a prefix the developer chose
    tmp = Path(tempfile.gettempdir())
    _drop_dead_runs(tmp)
    owner = os.getpid()
    d = tempfile.mkdtemp(prefix=f"gj-pycache-{owner}-")
    _link_installed(d)
    os.environ[MARK] = os.environ["PYTHONPYCACHEPREFIX"] = d
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(d, ignore_errors=True))
