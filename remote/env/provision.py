"""Provisioning: a job's ``setup:`` and ``requirements:`` run once per content hash.

The hash covers the setup commands, the requirements file's content, the interpreter
choice and that interpreter's path and version, and the torch and CUDA versions it sees.
Success leaves ``<root>/envs/<hash>.ok``; the next job with the same hash skips setup.
A lock file (``<hash>.lock``) keeps two jobs from provisioning the same hash at once.

``python:`` picks the interpreter for setup and run: the image's (default), ``conda:NAME``
(that env's ``bin`` first on PATH), ``venv`` (``<root>/envs/venv-<hash>``, created with
``--system-site-packages`` so the image's torch is reused), or a path. A venv lives at its
hashed path (venvs are not relocatable), so a failing install never touches an environment
that an earlier hash provisioned: the half-built venv is removed and no marker is left.

``ensure`` returns the environment variables to add to the job (PATH prefix, caches,
network settings); it raises ``SetupFailed`` when setup fails.
"""

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional

from remote.core import filelock, procs
from remote.core.jsontypes import JSONObject
from remote.core.layout import JobDir, Root, tail_lines
from remote.core.spec import JobSpec, SpecLike

TURBO_FILE = "/etc/network_turbo"
CONDA_BASES = ["/root/miniconda3", "/root/anaconda3", "/opt/conda", "~/miniconda3", "~/anaconda3"]
PROBE = r"""
import json, os, sys
d = {"executable": sys.executable, "version": sys.version.split()[0], "torch": None, "cuda": None}
try:
    from importlib import metadata
    d["torch"] = metadata.version("torch")
except Exception:
    pass
try:
    import importlib.util
    s = importlib.util.find_spec("torch")
    if s is not None and s.submodule_search_locations:
        with open(os.path.join(list(s.submodule_search_locations)[0], "version.py")) as f:
            for line in f:
                if line.startswith("cuda") and "=" in line:
                    v = line.split("=", 1)[1].strip().strip("'\"")
                    d["cuda"] = None if v in ("None", "") else v
except Exception:
    pass
print(json.dumps(d))
"""
PIP_SHIM = '#!/bin/sh\nexec "{py}" -m pip "$@"\n'


class SetupFailed(Exception):
    """Setup did not succeed; ``rc`` is its exit status (None: it could not start)."""

    def __init__(self, message: str, rc: Optional[int] = None) -> None:
        super().__init__(message)
        self.message, self.rc = message, rc


def marker(job: JobDir, text: str) -> None:
    with open(str(job.log), "a") as f:
        f.write("==> gpujob: setup {} [{}]\n".format(text, time.strftime("%Y-%m-%d %H:%M:%S")))


def turbo_mode(env: Dict[str, str]) -> str:
    """``GPUJOB_NETWORK_TURBO``: '' (off), 'setup', 'run' or 'both' (true/1/yes)."""
    v = (env.get("GPUJOB_NETWORK_TURBO") or "").strip().lower()
    if v in ("1", "true", "yes", "on", "both"):
        return "both"
    return v if v in ("setup", "run") else ""


def turbo_env(env: Dict[str, str]) -> Dict[str, str]:
    """The variables that sourcing the network_turbo file sets (its proxies), or {}."""
    path = env.get("GPUJOB_NETWORK_TURBO_FILE") or TURBO_FILE
    if not os.path.isfile(path):
        return {}
    script = 'source "$1" >/dev/null 2>&1; env -0'
    try:
        before = _env0(subprocess.run(["bash", "-c", "env -0"], env=env, stdout=subprocess.PIPE, timeout=20).stdout)
        after = _env0(subprocess.run(["bash", "-c", script, "x", path], env=env, stdout=subprocess.PIPE,
                                     timeout=20).stdout)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    skip = ("_", "SHLVL", "PWD", "OLDPWD")
    return {k: v for k, v in after.items() if before.get(k) != v and k not in skip}


def _env0(data: bytes) -> Dict[str, str]:
    out = {}
    for item in data.split(b"\0"):
        k, sep, v = item.decode("utf-8", "replace").partition("=")
        if sep:
            out[k] = v
    return out


def base_env(root: Root, job: JobDir, spec: SpecLike) -> Dict[str, str]:
    """What setup runs with: this environment without gpujob's own, plus host env, job env, secrets."""
    spec = JobSpec.of(spec)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOB_") and k != "PYTHONPATH"}
    env.update(spec.host_env)
    env.update(spec.env)
    wanted = set(spec.secrets)  # the job's secrets only: notification keys stay with the agent
    env.update({k: v for k, v in job.secrets_data().items() if k in wanted})
    # marks setup's processes as the job's: a stop or resume after the supervisor was killed
    # mid-setup ends them (procs.job_pids), instead of a second setup racing the orphan
    env.update(GPUJOB_JOB_ID=job.id, GPUJOB_JOB_DIR=str(job.path))
    return env


def login_python(env: Dict[str, str], prefix: str) -> Optional[str]:
    """The ``python`` a ``bash -lc`` run command would start (PATH prefix applied)."""
    script = _path_line(prefix) + "command -v python || command -v python3"
    try:
        res = subprocess.run(["bash", "-lc", script], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = res.stdout.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if res.returncode == 0 and lines else None


def probe(python: str, env: Dict[str, str]) -> JSONObject:
    """Interpreter path and version, torch and CUDA versions, without importing torch."""
    try:
        res = subprocess.run([python, "-c", PROBE], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=60)
        return json.loads(res.stdout.decode().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return {"executable": python, "version": None, "torch": None, "cuda": None}


def conda_prefix(name: str, env: Dict[str, str]) -> Optional[Path]:
    """The folder of conda env ``name`` (``base`` is the installation itself)."""
    bases = [Path(os.path.expanduser(b)) for b in CONDA_BASES]
    if env.get("CONDA_EXE"):
        bases.insert(0, Path(env["CONDA_EXE"]).resolve().parent.parent)
    for b in bases:
        p = b if name == "base" else b / "envs" / name
        if (p / "bin" / "python").exists():
            return p
    return None


def _path_line(prefix: str) -> str:
    if not prefix:
        return ""
    return 'export PATH={}:"$PATH"\n'.format(_q(prefix))  # quoted whole: a $( or ` in a folder's name is text


def _join(*parts: Optional[str]) -> str:
    return ":".join(p for p in parts if p)


def content_hash(spec: SpecLike, req_text: Optional[bytes], py: Mapping[str, object]) -> str:
    spec = JobSpec.of(spec)
    h = hashlib.sha256()
    doc = {"setup": spec.setup or "", "python": spec.python,
           "requirements": hashlib.sha256(req_text).hexdigest() if req_text is not None else None,
           "executable": py.get("executable"), "version": py.get("version"), "torch": py.get("torch"),
           "cuda": py.get("cuda")}
    h.update(json.dumps(doc, sort_keys=True).encode())
    return h.hexdigest()[:16]


def ensure(root: Root, job: JobDir, spec: SpecLike, tick: Optional[Callable[[], Any]] = None) -> Dict[str, str]:
    """Provision the job's environment if its hash has no marker; return the env to add to the job."""
    spec = JobSpec.of(spec)
    env = base_env(root, job, spec)
    extra = {}  # type: Dict[str, str]
    cache = root.root / "cache"
    if "PIP_CACHE_DIR" not in env:
        extra["PIP_CACHE_DIR"] = str(cache / "pip")
    if "HF_HOME" not in env:
        extra["HF_HOME"] = str(cache / "huggingface")
    turbo = turbo_mode(env)
    tenv = turbo_env(env) if turbo else {}
    if turbo and not tenv:
        marker(job, "note: network_turbo is on but {} is missing or sets nothing".format(
            env.get("GPUJOB_NETWORK_TURBO_FILE") or TURBO_FILE))
    if turbo in ("both", "run"):
        extra.update(tenv)
    prefix = env.get("GPUJOB_PATH_PREFIX", "")
    choice = spec.python
    interp_bin = None  # type: Optional[str]
    conda = None
    if choice.startswith("conda:"):
        name = choice[6:].strip()
        conda = conda_prefix(name, env)
        if conda is None:
            marker(job, "failed: conda env {!r} not found (looked under {})".format(name, ", ".join(CONDA_BASES)))
            raise SetupFailed("conda env {} not found".format(name))
        interp_bin = str(conda / "bin")
        extra.update(CONDA_PREFIX=str(conda), CONDA_DEFAULT_ENV=name)
    elif choice and choice not in ("venv", "image", "system", "default"):
        p = os.path.expanduser(choice)
        if not os.access(p, os.X_OK):
            marker(job, "failed: python {} is not an executable on this host".format(choice))
            raise SetupFailed("python {} not found".format(choice))
        interp_bin = os.path.dirname(os.path.abspath(p))
    if interp_bin:
        prefix = _join(interp_bin, prefix)
    needs = bool(spec.setup or spec.requirements or choice == "venv")
    if not needs:
        if prefix:
            extra["GPUJOB_PATH_PREFIX"] = prefix
        return extra
    base_py = os.path.join(interp_bin, "python") if interp_bin else login_python(env, prefix)
    py = probe(base_py, env) if base_py else {"executable": None, "version": None, "torch": None, "cuda": None}
    req_path = None  # type: Optional[Path]
    req_text = None  # type: Optional[bytes]
    if spec.requirements:
        req_path = job.code / spec.requirements
        try:
            req_text = req_path.read_bytes()
        except OSError as e:
            marker(job, "failed: cannot read the requirements file {}: {}".format(spec.requirements, e))
            raise SetupFailed("requirements file missing") from None
    digest = content_hash(spec, req_text, py)
    root.envs.mkdir(parents=True, exist_ok=True)
    ok = root.envs / (digest + ".ok")
    venv = root.envs / ("venv-" + digest) if choice == "venv" else None
    if venv is not None:
        prefix = _join(str(venv / "bin"), prefix)
        extra["VIRTUAL_ENV"] = str(venv)
    extra["GPUJOB_PATH_PREFIX"] = prefix
    extra["GPUJOB_ENV_HASH"] = digest

    def ready() -> bool:
        return ok.exists() and (venv is None or (venv / "bin" / "python").exists())

    if ready():
        marker(job, "skipped: environment {} is provisioned".format(digest))
        job.event("setup", result="skipped", hash=digest)
        return extra
    lock_fd = os.open(str(root.envs / (digest + ".lock")), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        waited = False
        while not filelock.lock(lock_fd, blocking=False):
            if not waited:
                marker(job, "waiting: another job is provisioning environment {}".format(digest))
                waited = True
            if tick and tick():
                raise SetupFailed("stopped while waiting for setup")
            time.sleep(0.25)
        if ready():
            marker(job, "skipped: environment {} was provisioned by another job".format(digest))
            job.event("setup", result="skipped", hash=digest)
            return extra
        marker(job, "started: environment {} ({} {}, torch {}, CUDA {})".format(
            digest, py.get("executable"), py.get("version"), py.get("torch"), py.get("cuda")))
        job.event("setup", result="started", hash=digest)
        run_env = dict(env, **{k: v for k, v in extra.items() if k not in tenv})
        if turbo in ("both", "setup"):
            run_env.update(tenv)
        started = time.time()
        rc = _provision(job, spec, run_env, prefix, base_py, venv, req_path, tick, lock_fd)
        if rc != 0:
            if venv is not None:
                shutil.rmtree(str(venv), ignore_errors=True)
            marker(job, "failed with exit code {} after {:.1f}s; no marker written, nothing kept".format(
                rc, time.time() - started))
            job.event("setup", result="failed", hash=digest, exit_code=rc)
            raise SetupFailed("setup failed", rc)
        with open(str(ok), "w") as f:
            json.dump({"hash": digest, "job": job.id, "at": time.time(), "python": py,
                       "python_choice": choice or "image", "venv": str(venv) if venv else None}, f, sort_keys=True)
        marker(job, "done: environment {} in {:.1f}s".format(digest, time.time() - started))
        job.event("setup", result="done", hash=digest, seconds=round(time.time() - started, 2))
        return extra
    finally:
        os.close(lock_fd)


def _provision(job: JobDir, spec: JobSpec, env: Dict[str, str], prefix: str, base_py: Optional[str],
               venv: Optional[Path], req: Optional[Path], tick: Optional[Callable[[], Any]], lock_fd: int = -1) -> int:
    """Create the venv if asked, then run requirements and setup under ``bash -lc``; the exit status.

    The setup's processes inherit the environment's lock (``lock_fd``, an flock): a supervisor
    killed mid-setup leaves the lock held by the setup still running, so a second job of the same
    hash waits for it to end instead of running setup beside it (or deleting the venv its pip
    still writes into)."""
    lines = ["set -e", _path_line(prefix).strip()]
    if venv is not None:
        if not base_py:
            marker(job, "failed: no python found to create the venv from")
            return 127
        shutil.rmtree(str(venv), ignore_errors=True)  # a half-built one from a crash
        q = _q(base_py)
        lines.append('if {} -c "import pip" >/dev/null 2>&1; then NOPIP=--without-pip; else NOPIP=; fi'.format(q))
        lines.append("{} -m venv --system-site-packages $NOPIP {}".format(q, _q(str(venv))))
        # without its own pip, `pip` would be the base's and install there: point it at the venv
        lines.append('if [ -n "$NOPIP" ]; then for n in pip pip3; do printf %s {} > {}/bin/$n; chmod +x {}/bin/$n; '
                     'done; fi'.format(_q(PIP_SHIM.format(py=venv / "bin" / "python")), _q(str(venv)), _q(str(venv))))
    if req is not None:
        lines.append("echo {}".format(_q("==> gpujob: setup pip install -r " + req.name)))
        pip_py = str(venv / "bin" / "python") if venv is not None else (base_py or "python3")
        lines.append("{} -m pip install -r {}".format(_q(pip_py), _q(str(req))))
    if spec.setup:
        lines.append(spec.setup)
    log = open(str(job.log), "ab")
    try:
        p = subprocess.Popen(["bash", "-lc", "\n".join(x for x in lines if x)], cwd=str(job.code), env=env,
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                             pass_fds=(lock_fd,) if lock_fd >= 0 else ())
    except OSError as e:
        log.close()
        marker(job, "could not start: {}".format(e))
        return 127
    log.close()
    while p.poll() is None:
        if tick and tick():
            _kill_group(p)
            marker(job, "stopped")
            return p.wait()
        time.sleep(0.25)
    return p.returncode


def _kill_group(p: subprocess.Popen) -> None:
    procs.end(lambda sig: procs.signal_group(p.pid, sig), lambda: p.poll() is None, 10.0, 5.0, tick=0.1)


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


def tail(job: JobDir, n: int = 20) -> List[str]:
    return tail_lines(job.log, n)
