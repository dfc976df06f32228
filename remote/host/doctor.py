"""``doctor``: what this instance has, in one JSON document (every field present, null when unknown).

Probes that may hang or be missing (torch, nvidia-smi, the login shell) run in
subprocesses with timeouts; nothing here needs a GPU.
"""

import glob
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Optional, TypedDict

from remote import AGENT_PROTOCOL
from remote.core import layout
from remote.core.layout import Root, tail_lines
from remote.slurm import doctor as slurm_doctor

TORCH_PROBE = r"""
import json, sys
from remote.core import layout
d = {"python": sys.executable, "version": None, "cuda": None, "cuda_available": None, "devices": [], "error": None}
try:
    import torch
    d["version"] = torch.__version__
    d["cuda"] = torch.version.cuda
    d["cuda_available"] = bool(torch.cuda.is_available())
    if d["cuda_available"]:
        d["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
except Exception as e:
    d["error"] = "{}: {}".format(type(e).__name__, e)
print(json.dumps(d))
"""
AUTODL_ENV = ("AutoDLRegion", "AutoDLContainerUUID", "AutoDLDataCenter")
PLATFORM_ENV = AUTODL_ENV + ("CONTAINER_ID", "VAST_CONTAINERLABEL", "RUNPOD_POD_ID")
AUTODL_DATA = "/root/autodl-tmp"


def _run(argv: List[str], timeout: float, env: Optional[Dict[str, str]] = None) -> Optional[str]:
    try:
        res = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout.decode("utf-8", "replace") if res.returncode == 0 else None


class OsInfo(TypedDict):
    name: str
    kernel: str
    arch: str
    hostname: str


class FoundPython(TypedDict):
    path: str
    source: str  # "login shell", "system", "conda base", "conda env NAME"
    version: Optional[str]


class SmiGpu(TypedDict):
    """One GPU as ``nvidia-smi --query-gpu`` lists it (MiB, percent; None where it printed no number)."""

    index: int
    name: str
    memory_total_mib: Optional[float]
    memory_used_mib: Optional[float]
    utilization: Optional[float]


class NvidiaInfo(TypedDict):
    """The driver's view: nvidia-smi's path, the driver and CUDA versions, the GPUs, or why not."""

    nvidia_smi: Optional[str]
    driver: Optional[str]
    cuda: Optional[str]
    gpus: Optional[List[SmiGpu]]
    error: Optional[str]


class DiskInfo(TypedDict):
    path: Optional[str]
    exists: bool
    free_bytes: Optional[int]
    total_bytes: Optional[int]


def _python_version(path: str) -> Optional[str]:
    out = _run([path, "-c", "import sys; print(sys.version.split()[0])"], 15)
    return out.strip() if out else None


def os_info() -> OsInfo:
    name = None
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    name = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return {"name": name or platform.system(), "kernel": platform.release(), "arch": platform.machine(),
            "hostname": socket.gethostname()}


def pythons(login: Optional[str]) -> List[FoundPython]:
    """System, conda (base and envs) and the login shell's python, each with its version."""
    found = []  # type: List[FoundPython]
    seen = set()

    def add(path: str, source: str) -> None:
        real = os.path.realpath(path)
        if not os.access(path, os.X_OK) or real in seen:
            return
        seen.add(real)
        found.append({"path": path, "source": source, "version": _python_version(path)})

    if login:
        add(login, "login shell")
    for p in ("/usr/bin/python3", "/usr/local/bin/python3"):
        add(p, "system")
    for base in ("/root/miniconda3", "/opt/conda", "/root/anaconda3", os.path.expanduser("~/miniconda3")):
        add(base + "/bin/python", "conda base")
        for env_py in sorted(glob.glob(base + "/envs/*/bin/python")):
            add(env_py, "conda env " + env_py.split("/")[-3])
    return found


def login_env(prefix: str, find: str = "command -v python || command -v python3") -> Dict[str, str]:
    """What a ``bash -lc`` command sees: python path (``find``) and the platform's variables."""
    script = ('if [ -n "$P" ]; then export PATH="$P:$PATH"; fi; echo "python=$(' + find + ')"; '
              + "; ".join('echo "{0}=${{{0}:-}}"'.format(k) for k in PLATFORM_ENV))
    out = _run(["bash", "-lc", script], 30, dict(os.environ, P=prefix)) or ""
    return {k: v for k, _, v in (line.partition("=") for line in out.splitlines()) if v}


def pid1_env() -> Dict[str, str]:
    """A container's own variables live in PID 1's environment (readable by root)."""
    try:
        data = Path("/proc/1/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in data.split(b"\0"):
        k, _, v = item.decode("utf-8", "replace").partition("=")
        if k in PLATFORM_ENV and v:
            out[k] = v
    return out


def torch_info(python: Optional[str], timeout: float) -> Mapping[str, object]:
    empty = {"python": python, "version": None, "cuda": None, "cuda_available": None, "devices": None, "error": None}
    if not python:
        return dict(empty, error="no python on the login shell's PATH")
    try:
        res = subprocess.run([python, "-c", TORCH_PROBE], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, timeout=timeout)
        return dict(empty, **json.loads(res.stdout.decode().strip().splitlines()[-1]))
    except subprocess.TimeoutExpired:
        return dict(empty, error="import torch took over {:.0f}s".format(timeout))
    except (OSError, ValueError, IndexError) as e:
        return dict(empty, error="probe failed: {}".format(e))


def nvidia(prefix: str) -> NvidiaInfo:
    path = os.pathsep.join(p for p in (prefix, os.environ.get("PATH", "")) if p)
    exe = shutil.which("nvidia-smi", path=path)
    doc = {"nvidia_smi": exe, "driver": None, "cuda": None, "gpus": None, "error": None}  # type: NvidiaInfo
    if not exe:
        doc["error"] = "nvidia-smi not found"
        return doc
    q = "index,name,driver_version,memory.total,memory.used,utilization.gpu"
    out = _run([exe, "--query-gpu=" + q, "--format=csv,noheader,nounits"], 20)
    if out is None:
        doc["error"] = "nvidia-smi failed or timed out"
        return doc
    gpus = []  # type: List[SmiGpu]
    for line in out.strip().splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) < 6:
            continue

        def num(x: str) -> Optional[float]:
            try:
                return float(x)
            except ValueError:
                return None

        gpus.append({"index": int(num(parts[0]) or 0), "name": parts[1], "memory_total_mib": num(parts[3]),
                     "memory_used_mib": num(parts[4]), "utilization": num(parts[5])})
        doc["driver"] = parts[2]
    doc["gpus"] = gpus
    head = _run([exe], 20) or ""
    if "CUDA Version:" in head:
        doc["cuda"] = head.split("CUDA Version:", 1)[1].split()[0].strip("| ")
    return doc


def disk(path: Optional[str]) -> DiskInfo:
    if not path:
        return {"path": None, "exists": False, "free_bytes": None, "total_bytes": None}
    p = Path(os.path.expanduser(path))
    probe = p
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.statvfs(str(probe))
        return {"path": str(p), "exists": p.exists(), "free_bytes": st.f_bavail * st.f_frsize,
                "total_bytes": st.f_blocks * st.f_frsize}
    except OSError:
        return {"path": str(p), "exists": p.exists(), "free_bytes": None, "total_bytes": None}


def report(root: Root, data_disk: Optional[str] = None, turbo_file: Optional[str] = None, path_prefix: str = "",
           torch_timeout: float = 60.0, job: Optional[Mapping[str, object]] = None,
           slurm: Optional[Mapping[str, Optional[str]]] = None, slurm_wait: float = 60.0) -> Mapping[str, object]:
    """Every field, null when unknown.

    Python and torch are those of the newest job's interpreter (its ``python:`` and PATH, kept
    in env.json) when a job has run here: what jobs actually run, not the bare login shell's.
    ``job`` ({run, python, setup}): that job's interpreter, resolved as its submit would.
    ``slurm`` ({partition, account, qos}): this is a Slurm cluster's login node; its ``slurm`` part
    (remote/slurm/doctor.py) checks the cluster, a test job waiting at most ``slurm_wait`` s to start.
    """
    from remote.env import jobenv

    job_id, jenv = jobenv.newest(root)
    # what `run: python ...` of a job without python: gets: the login shell's `python` under the
    # host's own PATH prefix (not another job's venv)
    python_cmd = login_env(path_prefix, "command -v python").get("python") or None
    job_interpreter = None
    if job is not None:
        from remote.env import interpreter

        job_interpreter = interpreter.resolve(job, path_prefix)
    if jenv.get("GPUJOB_PATH_PREFIX"):
        path_prefix = jenv["GPUJOB_PATH_PREFIX"]
    lenv = login_env(path_prefix)
    if jenv.get("GPUJOB_PYTHON"):
        lenv["python"] = jenv["GPUJOB_PYTHON"]
    penv = pid1_env()
    plat = {}  # type: Dict[str, str]
    for source in (penv, lenv, os.environ):
        for k in PLATFORM_ENV:
            if source.get(k):
                plat[k] = source[k]
    data_disk = data_disk or (AUTODL_DATA if os.path.isdir(AUTODL_DATA) else None)
    is_autodl = bool(plat.get("AutoDLRegion") or plat.get("AutoDLContainerUUID") or os.path.isdir(AUTODL_DATA))
    platform_name = ("autodl" if is_autodl else "vast" if plat.get("CONTAINER_ID") or plat.get("VAST_CONTAINERLABEL")
                     else "runpod" if plat.get("RUNPOD_POD_ID") else "generic")
    login_py = lenv.get("python") or None
    turbo = turbo_file or "/etc/network_turbo"
    agent_dir = layout.AGENT_DIR
    return {
        "agent": {"version": agent_dir.name, "protocol": AGENT_PROTOCOL, "python": sys.executable,
                  "python_version": sys.version.split()[0]},
        "os": os_info(),
        "login_python": login_py,
        "python_command": python_cmd,
        "job_python": {"job_id": job_id, "python": login_py, "path_prefix": path_prefix} if job_id else None,
        "job_interpreter": job_interpreter,
        "pythons": pythons(login_py),
        "torch": torch_info(login_py, torch_timeout),
        "nvidia": nvidia(path_prefix),
        "disks": {"system": disk("/"), "data": disk(data_disk), "root": disk(str(root.root))},
        "network_turbo": {"path": turbo, "exists": os.path.isfile(turbo)},
        "platform": {"name": platform_name, "autodl": is_autodl, "region": plat.get("AutoDLRegion"),
                     "container": plat.get("AutoDLContainerUUID") or plat.get("CONTAINER_ID") or plat.get("RUNPOD_POD_ID")},
        "env": {k: os.environ.get(k) or lenv.get(k) for k in ("HF_ENDPOINT", "HF_HOME", "PIP_INDEX_URL", "http_proxy")},
        "root": str(root.root),
        "envs": sorted(p.name[:-3] for p in root.envs.glob("*.ok")) if root.envs.is_dir() else [],
        "agent_log_tail": tail_lines(root.agent_log, 10),
        "slurm": None if slurm is None else slurm_doctor.report(root, slurm.get("partition"), slurm.get("account"),
                                                              slurm.get("qos"), slurm_wait),
    }
