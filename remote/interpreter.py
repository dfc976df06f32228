"""Before a job is created: the interpreter its ``run:`` starts with is on the job's PATH.

A job without ``python:`` runs ``run:`` in a login shell with the host's PATH prefix; on an image
whose login PATH has only ``python3``, ``run: python train.py`` would be created, queued and
started, to fail with exit 127. The same lookup the job gets (``bash -lc`` with
``GPUJOB_PATH_PREFIX`` put first, as the supervisor does) decides; a found interpreter is
remembered for an hour in ``<root>/cache/interpreters.json`` (a login shell can take a second).
"""

import os
import re
import shlex
import subprocess
import time
from typing import Any, Dict, Optional

from remote.errors import AgentError
from remote.jobenv import PATH_PREFIX
from remote.layout import Root, read_doc, write_json

CHECKED = re.compile(r"^(python[0-9.]*|torchrun|accelerate|deepspeed)$")  # interpreters and launchers, by name
REMEMBER_S = 3600.0


def first_command(run: str) -> Optional[str]:
    """The program ``run`` starts (after ``VAR=value`` words), or None when it cannot be told."""
    try:
        words = shlex.split(run)
    except ValueError:
        return None
    for w in words:
        if "=" in w.split("/")[0] and not w.startswith(("=", "-")):
            continue
        return w
    return None


def check(root: Root, spec: Dict[str, Any], host_env: Dict[str, str]) -> None:
    """``AgentError`` when ``run:`` starts with an interpreter or launcher (``python``, ``python3.11``,
    ``torchrun``...) that the job's PATH does not have."""
    if (spec.get("python") or "").strip() or spec.get("setup"):
        return  # setup or python: decides the interpreter (and says so when it cannot)
    cmd = first_command(str(spec.get("run") or ""))
    if cmd is None or not CHECKED.match(cmd):
        return
    prefix = host_env.get("GPUJOB_PATH_PREFIX", "")
    key = "{}\0{}".format(cmd, prefix)
    cache = root.root / "cache" / "interpreters.json"
    seen = read_doc(cache)
    if isinstance(seen.get(key), (int, float)) and time.time() - seen[key] < REMEMBER_S:
        return
    env = dict(os.environ, GPUJOB_PATH_PREFIX=prefix)
    try:
        res = subprocess.run(["bash", "-lc", PATH_PREFIX + "command -v " + cmd], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return  # cannot tell: the job's own run says
    if res.returncode == 0 and res.stdout.strip():
        try:
            write_json(cache, dict(seen, **{key: time.time()}))
        except OSError:
            pass
        return
    raise AgentError(
        "`{}` is not on this host's job PATH (a login shell's PATH{}): run: {} would exit 127; nothing was "
        "submitted".format(cmd, " after " + prefix if prefix else "", spec.get("run")),
        "write python3 in run:, or set python: to an interpreter (a path, venv or conda:NAME), or install "
        "python-is-python3 there; gpujob doctor HOST lists the interpreters found", "no_interpreter")
