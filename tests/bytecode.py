"""Bytecode for every Python process the tests start, cached once per run outside the trees tests read.

A dev image may set ``PYTHONDONTWRITEBYTECODE`` (this project's does): then each of the thousands of
``gpujob`` commands and local agents a run starts compiles its modules from source again, about a third
of a command's CPU (0.34 s against 0.22 s for a status's imports) — on CI's two cores, minutes. A user's
install has its bytecode (pip compiles it), so the tests should too. ``PYTHONPYCACHEPREFIX`` puts it in
one folder per run, keyed by source path, so no ``__pycache__`` appears in a job's code, a synced
project or the checkout: what a test lists, syncs or pulls is unchanged.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
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


def share_bytecode() -> None:
    if os.environ.get(MARK) or os.environ.get("PYTHONPYCACHEPREFIX"):
        return  # a worker of this run, or a prefix the developer chose
    tmp = Path(tempfile.gettempdir())
    _drop_dead_runs(tmp)
    owner = os.getpid()
    d = tempfile.mkdtemp(prefix=f"gj-pycache-{owner}-")
    os.environ[MARK] = os.environ["PYTHONPYCACHEPREFIX"] = d
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(d, ignore_errors=True))
