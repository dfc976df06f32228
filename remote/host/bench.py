"""``bench``: the preflight of a rented host (``gpujob doctor HOST --bench``), under a minute.

Measured, not read: matmul TFLOP/s in bf16 and fp16, device-memory and host-to-device bandwidth
(with the job's own torch, ``GPU_PROBE``, one GPU after another), the data disk's write and read
MB/s and free inodes; read: ECC errors, retired pages and remapped rows (``nvidia-smi -q``), Xid
events (the kernel log, where this user may read it), and whether the driver can run the CUDA
torch was built for. Every slow or faulty finding is a line of ``warnings``.
"""

import os
import re
import shutil
import subprocess
import time
from typing import Any, Dict, List, Optional, TypedDict

from remote.core.jsontypes import JSONObject
from remote.core.layout import Root
from remote.host import doctor, rated

# run with the job's python: one JSON line; figures per GPU, within ``budget`` seconds per GPU
GPU_PROBE = r"""
import json, sys, time
budget = float(sys.argv[1])
d = {"python": sys.executable, "torch": None, "torch_cuda": None, "gpus": [], "skipped": None, "error": None}
try:
    import torch
except Exception as e:
    d["error"] = "import torch: {}: {}".format(type(e).__name__, e)
    print(json.dumps(d)); sys.exit(0)
d["torch"], d["torch_cuda"] = torch.__version__, torch.version.cuda
if not torch.cuda.is_available():
    d["skipped"] = "no CUDA device visible to torch {} (CUDA {})".format(torch.__version__, torch.version.cuda)
    print(json.dumps(d)); sys.exit(0)

def timed(fn, share):
    torch.cuda.synchronize()
    for _ in range(3):  # cuBLAS picks its kernel and the clocks ramp up on the first calls
        fn()
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while True:
        fn(); n += 1
        if n % 4 == 0:
            torch.cuda.synchronize()
            t = time.perf_counter() - t0
            if t > budget * share or n >= 400:
                return n, t

for i in range(torch.cuda.device_count()):
    dev = torch.device("cuda", i)
    torch.cuda.set_device(dev)
    g = {"index": i, "name": torch.cuda.get_device_name(i)}
    try:
        free, total = torch.cuda.mem_get_info(dev)
        size = 8192 if free > 2 * 1024**3 else 4096
        for key, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
            if key == "bf16" and torch.cuda.get_device_capability(i) < (8, 0):
                g["bf16_tflops"] = None  # no bf16 tensor cores: emulated, not a rate worth judging
                continue
            a = torch.randn(size, size, device=dev, dtype=dt); b = torch.randn(size, size, device=dev, dtype=dt)
            n, t = timed(lambda: a @ b, 0.3)
            g[key + "_tflops"] = round(2 * size**3 * n / t / 1e12, 1)
            del a, b
        nbytes = min(1024**3, free // 4)
        x = torch.empty(nbytes, dtype=torch.uint8, device=dev); y = torch.empty_like(x)
        n, t = timed(lambda: y.copy_(x), 0.2)
        g["mem_gbs"] = round(2 * nbytes * n / t / 1e9, 1)  # each copy reads and writes every byte
        del x, y
        h = torch.empty(256 * 1024**2, dtype=torch.uint8, pin_memory=True); z = torch.empty(h.numel(), dtype=torch.uint8, device=dev)
        n, t = timed(lambda: z.copy_(h, non_blocking=True), 0.1)
        g["h2d_gbs"] = round(h.numel() * n / t / 1e9, 1)
        del h, z
        torch.cuda.empty_cache()
    except Exception as e:
        g["error"] = "{}: {}".format(type(e).__name__, str(e)[:300])
    d["gpus"].append(g)
print(json.dumps(d))
"""
DISK_MIB = int(os.environ.get("GPUJOB_BENCH_DISK_MIB", "256"))
LOW_INODES = 100000  # fewer free: a dataset of small files or a pip install may not fit
XID_RE = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)")


def _run(argv: List[str], timeout: float) -> Optional[str]:
    try:
        res = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout.decode("utf-8", "replace") if res.returncode == 0 else None


class DiskBench(TypedDict, total=False):
    """The disk's speed (MB/s) and room, or why it could not be measured."""

    path: str
    write_mbs: float
    read_mbs: float
    error: str
    free_inodes: int
    inodes: int
    free_bytes: int


class Xid(TypedDict):
    bus: str
    xid: int


class XidEvents(TypedDict):
    readable: bool  # False in a container that hides the kernel log
    events: List[Xid]


def disk(path: str) -> DiskBench:
    """Write ``DISK_MIB`` MiB (fsync'd), read them back past the page cache, count free inodes."""
    os.makedirs(path, exist_ok=True)
    f = os.path.join(path, ".gpujob-bench.tmp")
    block = os.urandom(4 * 1024 * 1024)
    n = max(1, DISK_MIB // 4)
    out = {"path": path}  # type: DiskBench
    try:
        t0 = time.monotonic()
        fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for _ in range(n):
                os.write(fd, block)
            os.fsync(fd)
        finally:
            os.close(fd)
        out["write_mbs"] = round(n * 4 / max(time.monotonic() - t0, 1e-6), 1)
        fd = os.open(f, os.O_RDONLY)
        try:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # read the disk, not the cache
            t0 = time.monotonic()
            while os.read(fd, 4 * 1024 * 1024):
                pass
            out["read_mbs"] = round(n * 4 / max(time.monotonic() - t0, 1e-6), 1)
        finally:
            os.close(fd)
    except OSError as e:
        out["error"] = "{}: {}".format(f, e.strerror)
    finally:
        try:
            os.unlink(f)
        except OSError:
            pass
    try:
        st = os.statvfs(path)
        out["free_inodes"], out["inodes"] = st.f_favail, st.f_files
        out["free_bytes"] = st.f_bavail * st.f_frsize
    except OSError:
        pass
    return out


def smi_health(text: str) -> List[Dict[str, Any]]:
    """Per GPU from ``nvidia-smi -q``: volatile ECC errors (corrected, uncorrected), retired pages,
    remapped rows, and whether a retirement or remap is pending or failed."""
    gpus = []  # type: List[Dict[str, Any]]
    path = []  # type: List[tuple]
    for raw in text.splitlines():
        if not raw.strip():
            continue
        if raw.startswith("GPU "):
            gpus.append({"bus": raw[4:].strip(), "ecc_corrected": 0, "ecc_uncorrected": 0, "retired_pages": 0,
                         "remapped_rows": 0, "pending": False})
            path = []
            continue
        if not gpus:
            continue
        indent = len(raw) - len(raw.lstrip())
        key, sep, val = raw.strip().partition(":")
        key, val = key.strip().lower(), val.strip()
        while path and path[-1][0] >= indent:
            path.pop()
        if not sep or not val:
            path.append((indent, key))
            continue
        where = [k for _, k in path]
        g = gpus[-1]
        num = int(val) if val.isdigit() else None
        if "ecc errors" in where and "volatile" in where and num is not None:
            if ("single bit" in where or "double bit" in where) and key != "total":
                continue  # the older layout (V100): count each block's Total once
            said = " ".join(where + [key])
            g["ecc_uncorrected" if ("uncorr" in said or "double" in said) else "ecc_corrected"] += num
        elif "retired pages" in where:
            if "pending" in key and val.lower() == "yes":
                g["pending"] = True
            elif num is not None:
                g["retired_pages"] += num
        elif "remapped rows" in where:
            if ("pending" in key or "failure" in key) and val.lower() == "yes":
                g["pending"] = True
            elif "uncorrectable" in key and num is not None:
                g["remapped_rows"] += num
    return gpus


def xid_events() -> XidEvents:
    """Xid lines of the kernel log (NVIDIA's driver errors), or ``readable: False`` in a container that hides it."""
    text = _run(["dmesg"], 10)
    if text is None:
        return {"readable": False, "events": []}
    events = [{"bus": m.group(1), "xid": int(m.group(2))} for m in XID_RE.finditer(text)]  # type: List[Xid]
    return {"readable": True, "events": events[-20:]}


def _version(text: Optional[str]) -> tuple:
    try:
        return tuple(int(x) for x in (text or "").split(".")[:2])
    except ValueError:
        return ()


def judge(doc: Dict[str, Any]) -> List[str]:
    """The findings worth a warning at submit."""
    out = []
    for g in doc.get("gpus") or []:
        r = g.get("rated") or {}
        for key in ("bf16", "fp16"):
            got, want = g.get(key + "_tflops"), r.get(key + "_tflops")
            if got and want and got < rated.SLOW * want:
                card = r["card"].upper()
                out.append("GPU {} measured {:.0f} % of {} {}'s {} rate ({} of {} TFLOP/s)".format(
                    g["index"], 100 * got / want, "a" if card.startswith("V") else "an", card, key, got, want))
                break
        h = g.get("health") or {}
        if h.get("ecc_uncorrected") or h.get("retired_pages") or h.get("remapped_rows") or h.get("pending"):
            out.append("GPU {}: {} uncorrected ECC error(s), {} retired page(s), {} remapped row(s){}".format(
                g["index"], h.get("ecc_uncorrected", 0), h.get("retired_pages", 0), h.get("remapped_rows", 0),
                ", a retirement or remap pending (reboot needed)" if h.get("pending") else ""))
        if g.get("error"):
            out.append("GPU {}: the benchmark failed: {}".format(g["index"], g["error"]))
    xid = doc.get("xid") or {}
    if xid.get("events"):
        codes = sorted({e["xid"] for e in xid["events"]})
        out.append("{} Xid event(s) in the kernel log (Xid {})".format(len(xid["events"]), ", ".join(map(str, codes))))
    v = doc.get("versions") or {}
    if v.get("torch_cuda") and v.get("driver_cuda") and _version(v["torch_cuda"]) > _version(v["driver_cuda"]):
        out.append("torch {} is built for CUDA {} but driver {} supports CUDA {} at most".format(
            v.get("torch"), v["torch_cuda"], v.get("driver"), v["driver_cuda"]))
    d = doc.get("disk") or {}
    if d.get("free_inodes") is not None and d["free_inodes"] < LOW_INODES:
        out.append("{}: only {} free inodes".format(d.get("path"), d["free_inodes"]))
    if d.get("error"):
        out.append("disk test failed: {}".format(d["error"]))
    return out


def run(root: Root, data_disk: Optional[str] = None, path_prefix: str = "", budget: float = 40.0) -> JSONObject:
    """The preflight document; GPU steps skipped (and said so) on a host without nvidia-smi."""
    from remote.env import jobenv

    t0 = time.time()
    _, jenv = jobenv.newest(root)
    path_prefix = jenv.get("GPUJOB_PATH_PREFIX") or path_prefix
    nv = doctor.nvidia(path_prefix)
    # the job's interpreter; the login shell's (a slow bash -lc) only where there are GPUs to measure
    python = jenv.get("GPUJOB_PYTHON") or (doctor.login_env(path_prefix).get("python") if nv.get("gpus") else None)
    doc = {"at": t0, "python": python, "skipped": [], "gpus": []}  # type: Dict[str, Any]
    target = data_disk if data_disk and os.path.isdir(os.path.expanduser(data_disk)) else str(root.root)
    doc["disk"] = disk(os.path.expanduser(target))
    versions = {"driver": nv.get("driver"), "driver_cuda": nv.get("cuda"), "torch": None, "torch_cuda": None}
    if not nv.get("gpus"):
        doc["skipped"].append("GPU steps: {} (a CPU host)".format(nv.get("error") or "nvidia-smi lists no GPU"))
    elif not python:
        doc["skipped"].append("GPU steps: no python on the login shell's PATH")
    else:
        smi = shutil.which("nvidia-smi", path=os.pathsep.join(p for p in (path_prefix, os.environ.get("PATH", "")) if p))
        health = smi_health(_run([smi or "nvidia-smi", "-q"], 30) or "")
        listed = nv["gpus"] or []  # (not empty: a host without GPUs took the first branch)
        per = max(2.0, budget / max(1, len(listed)))
        probe = _probe(python, per, timeout=budget + 60)
        versions.update(torch=probe.get("torch"), torch_cuda=probe.get("torch_cuda"))
        if probe.get("skipped") or probe.get("error"):
            doc["skipped"].append("GPU steps: " + (probe.get("skipped") or probe.get("error") or ""))
        measured = {g["index"]: g for g in probe.get("gpus") or []}
        for i, g in enumerate(listed):
            row = dict(measured.get(i) or {"index": g["index"], "name": g["name"]})
            row["rated"] = rated.rated(g["name"])
            row["health"] = health[i] if i < len(health) else None
            for key in ("bf16_tflops", "fp16_tflops", "mem_gbs"):
                want = (row["rated"] or {}).get(key)
                if row.get(key) and want:
                    row[key.split("_")[0] + "_pct"] = round(100 * row[key] / want)
            doc["gpus"].append(row)
        doc["xid"] = xid_events()
    doc["versions"] = versions
    doc["warnings"] = judge(doc)
    doc["seconds"] = round(time.time() - t0, 1)
    return doc


def _probe(python: str, per_gpu: float, timeout: float) -> Dict[str, Any]:
    import json

    try:
        res = subprocess.run([python, "-c", GPU_PROBE, str(per_gpu)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, timeout=timeout)
        return json.loads(res.stdout.decode().strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return {"error": "the GPU steps took over {:.0f} s".format(timeout)}
    except (OSError, ValueError, IndexError) as e:
        return {"error": "{} could not run the GPU steps: {}".format(python, e)}
