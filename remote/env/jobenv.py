"""The environment a job's run command gets beyond the host's: its ``python:`` interpreter and PATH.

Setup decides it (``provision.ensure``: a venv, ``conda:NAME``, a path) and the supervisor keeps
it in ``<job>/env.json``, so that what serves the job later — TensorBoard for ``gpujob tunnel``,
``gpujob doctor``, ``gpujob exec`` — runs the same interpreter the job did. No secret is written.
"""

import os
from typing import Dict, Optional, Tuple

from remote.core.layout import JobDir, Root, read_json, write_json
from remote.core.spec import JobSpec, SpecLike

KEYS = ("GPUJOB_PATH_PREFIX", "GPUJOB_PYTHON", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "GPUJOB_ENV_HASH")
FILE = "env.json"
# The shell line putting the job's PATH in front (bash -lc runs it first): a login shell may
# reset PATH (Debian's /etc/profile does); the local host puts the laptop's own PATH (its venv) back.
PATH_PREFIX = 'if [ -n "${GPUJOB_PATH_PREFIX:-}" ]; then export PATH="$GPUJOB_PATH_PREFIX:$PATH"; fi\n'


def python_of(spec: SpecLike, env: Dict[str, str]) -> Optional[str]:
    """The interpreter ``python:`` names once set up (None: the login shell's ``python``)."""
    if env.get("VIRTUAL_ENV"):
        return os.path.join(env["VIRTUAL_ENV"], "bin", "python")
    if env.get("CONDA_PREFIX"):
        return os.path.join(env["CONDA_PREFIX"], "bin", "python")
    choice = JobSpec.of(spec).python
    if choice and not choice.startswith("conda:") and choice not in ("venv", "image", "system", "default"):
        return os.path.expanduser(choice)
    return None


def record(job: JobDir, spec: SpecLike) -> None:
    """Keep the job's interpreter and PATH prefix (from its host_env after setup) in env.json."""
    spec = JobSpec.of(spec)
    env = spec.host_env
    doc = {k: env[k] for k in KEYS if env.get(k)}
    py = python_of(spec, env)
    if py:
        doc["GPUJOB_PYTHON"] = py
    write_json(job.path / FILE, doc)


def load(job: JobDir) -> Dict[str, str]:
    """The job's recorded environment; before setup ran, the host's PATH prefix and ``python:``."""
    doc = read_json(job.path / FILE, None)
    if isinstance(doc, dict):
        return {k: str(v) for k, v in doc.items() if k in KEYS}
    spec = job.job_spec()
    env = dict(spec.host_env)
    out = {k: env[k] for k in KEYS if env.get(k)}
    choice = spec.python
    if choice.startswith("conda:"):
        from remote.env import provision

        prefix = provision.conda_prefix(choice[6:].strip(), dict(os.environ, **env))
        if prefix is not None:
            out.update(CONDA_PREFIX=str(prefix), CONDA_DEFAULT_ENV=choice[6:].strip())
            out["GPUJOB_PATH_PREFIX"] = ":".join(x for x in (str(prefix / "bin"), out.get("GPUJOB_PATH_PREFIX")) if x)
    py = python_of(spec, out)
    if py:
        out["GPUJOB_PYTHON"] = py
        if not out.get("CONDA_PREFIX"):
            out["GPUJOB_PATH_PREFIX"] = ":".join(x for x in (os.path.dirname(py), out.get("GPUJOB_PATH_PREFIX")) if x)
    return out


def newest(root: Root) -> Tuple[Optional[str], Dict[str, str]]:
    """(job id, recorded environment) of the newest job that went through setup, else (None, {})."""
    if not root.jobs.is_dir():
        return None, {}
    best = None  # type: Optional[Tuple[float, str]]
    for p in root.jobs.iterdir():
        f = p / FILE
        try:
            t = f.stat().st_mtime
        except OSError:
            continue
        if best is None or t > best[0]:
            best = (t, p.name)
    if best is None:
        return None, {}
    return best[1], load(root.job(best[1]))
