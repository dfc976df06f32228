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
from typing import Any, Callable, Dict, Optional

from remote.core import atomicfile
from remote.core.errors import AgentError
from remote.core.jsontypes import JSONObject
from remote.core.layout import Root, read_doc
from remote.core.spec import JobSpec, SpecLike
from remote.env.jobenv import PATH_PREFIX

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


def _lookup(cmd: str, prefix: str) -> Optional[str]:
    """Where the job's login shell finds ``cmd`` ("" when it does not; None when it cannot tell)."""
    return _lookup_result(_start_lookup(cmd, prefix))


def _start_lookup(cmd: str, prefix: str) -> Optional["subprocess.Popen[bytes]"]:
    env = dict(os.environ, GPUJOB_PATH_PREFIX=prefix)
    try:
        return subprocess.Popen(["bash", "-lc", PATH_PREFIX + "command -v " + shlex.quote(cmd)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    except OSError:
        return None


def _lookup_result(proc: Optional["subprocess.Popen[bytes]"]) -> Optional[str]:
    if proc is None:
        return None
    try:
        out = proc.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None
    lines = out.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if proc.returncode == 0 and lines else ""


def _missing(cmd: str, prefix: str, run: Any) -> AgentError:
    return AgentError(
        "`{}` is not on this host's job PATH (a login shell's PATH{}): run: {} would exit 127; nothing was "
        "submitted".format(cmd, " after " + prefix if prefix else "", run),
        "write python3 in run:, or set python: to an interpreter (a path, venv or conda:NAME), or install "
        "python-is-python3 there; gpujob doctor HOST lists the interpreters found", "no_interpreter")


def check(root: Root, spec: SpecLike, host_env: Dict[str, str]) -> None:
    """``AgentError`` when ``run:`` starts with an interpreter or launcher (``python``, ``python3.11``,
    ``torchrun``...) that the job's PATH does not have."""
    start_check(root, spec, host_env)()


def start_check(root: Root, spec: SpecLike, host_env: Dict[str, str], host: str = "") -> Callable[[], None]:
    """``check`` in two halves: the login shell's lookup starts now (it can take a second) and the
    returned function waits for it, raising ``AgentError`` when the interpreter is missing; the
    submit makes the job's code snapshot meanwhile. A ``python:`` path or conda env is checked
    here too (``host``: the profile's name, for the message), before setup could not find it."""
    spec = JobSpec.of(spec)
    if spec.python not in ("", "venv", "image", "system", "default"):
        return _start_python_check(spec.python, host or "this host")
    if spec.python or spec.setup:
        return _nothing  # setup or python: decides the interpreter (and says so when it cannot)
    cmd = first_command(spec.run)
    if cmd is None or not CHECKED.match(cmd):
        return _nothing
    prefix = host_env.get("GPUJOB_PATH_PREFIX", "")
    key = "{}\0{}".format(cmd, prefix)
    cache = root.root / "cache" / "interpreters.json"
    seen = read_doc(cache)
    if isinstance(seen.get(key), (int, float)) and time.time() - seen[key] < REMEMBER_S:
        return _nothing
    proc = _start_lookup(cmd, prefix)

    def finish() -> None:
        found = _lookup_result(proc)
        if found is None:
            return  # cannot tell: the job's own run says
        if found:
            try:  # under the file's lock, over what other submits found meanwhile
                atomicfile.update_json(cache, lambda doc: doc.update({key: time.time()}), durable=False)
            except OSError:
                pass
            return
        raise _missing(cmd, prefix, spec.run)

    return finish


def _nothing() -> None:
    return None


def _start_python_check(choice: str, host: str) -> Callable[[], None]:
    """``python:`` as a path (or ``conda:NAME``): it exists there and runs (a broken venv's python does
    not), else ``AgentError`` naming it and the host: a job would be made only to fail in its setup."""
    if choice.startswith("conda:"):
        from remote.env import provision

        name = choice[6:].strip()
        if provision.conda_prefix(name, dict(os.environ)) is not None:
            return _nothing
        return _refuse("python: conda env {!r} is not on {} (looked under {})".format(
            name, host, ", ".join(provision.CONDA_BASES)), "create it there, or change python:")
    path = os.path.expanduser(choice)
    if not os.path.exists(path):
        why = "no such file"
    elif not os.path.isfile(path) or not os.access(path, os.X_OK):
        why = "not an executable file"
    else:
        try:
            proc = subprocess.Popen([path, "-c", "import sys"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE)
        except OSError as e:
            why = "it does not start: {}".format(e.strerror or e)
        else:
            return lambda: _ran(proc, choice, host)
    return _refuse("python: {} is not an interpreter on {} ({})".format(choice, host, why), _PYTHON_REMEDY.format(host))


_PYTHON_REMEDY = ("give the interpreter's full path there (gpujob exec {0} -- which python3 shows one; gpujob doctor "
                  "{0} --job job.yaml lists what a job finds), or python: venv or conda:NAME")


def _ran(proc: "subprocess.Popen[bytes]", choice: str, host: str) -> None:
    try:
        err = proc.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return  # a slow start is no proof it is broken: the job's own run says
    if proc.returncode != 0:
        said = " ".join(err.decode("utf-8", "replace").strip().splitlines()[-1:])[:200]
        raise AgentError("python: {} does not run on {} (exit {}{}); nothing was submitted".format(
            choice, host, proc.returncode, ": " + said if said else ""), _PYTHON_REMEDY.format(host), "no_interpreter")


def _refuse(message: str, remedy: str) -> Callable[[], None]:
    def refuse() -> None:
        raise AgentError(message + "; nothing was submitted", remedy, "no_interpreter")
    return refuse


def resolve(spec: SpecLike, prefix: str) -> JSONObject:
    """``doctor --job``: the interpreter this job's ``python:`` and ``run:`` get here, found as a
    submit and its setup find it (nothing cached): {python, command, path, error, remedy}."""
    from remote.env import provision

    spec = JobSpec.of(spec)
    choice = spec.python
    cmd = first_command(spec.run)
    out = {"python": choice or None, "command": cmd, "path": None, "error": None, "remedy": None}  # type: JSONObject
    if choice.startswith("conda:"):
        env = provision.conda_prefix(choice[6:].strip(), dict(os.environ))
        if env is None:
            out.update(error="conda env {!r} not found (looked under {})".format(
                choice[6:].strip(), ", ".join(provision.CONDA_BASES)), remedy="create it there, or change python:")
        else:
            out["path"] = str(env / "bin" / "python")
        return out
    if choice and choice not in ("venv", "image", "system", "default"):
        p = os.path.expanduser(choice)
        if os.access(p, os.X_OK):
            out["path"] = p
        else:
            out.update(error="not an executable on this host",
                       remedy="give the interpreter's full path there, or conda:NAME or venv")
        return out
    if choice == "venv" or cmd is None or not CHECKED.match(cmd):
        cmd = "python"  # the venv is made from the login shell's python; an unchecked run: gets it too
    out["looked_up"] = cmd
    found = _lookup(cmd, prefix)
    if found:
        out["path"] = found
    elif found == "" and not spec.setup:
        e = _missing(cmd, prefix, spec.run or None)  # None: as a spec without run: always said
        out.update(error=e.message.replace("; nothing was submitted", ""), remedy=e.remedy)
    elif found == "":
        out.update(error="`{}` is not on the job PATH before setup: runs (it may install it)".format(cmd), level="warn")
    return out
