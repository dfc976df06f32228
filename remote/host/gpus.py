"""GPUs on this host: sampling ``nvidia-smi`` into gpu.jsonl, and allocating free GPUs.

No ``nvidia-smi`` on PATH means a CPU host: sampling does nothing and a job that asks for
no GPUs runs at once. Allocation is per agent root: a GPU is free when no other live job
of this root holds it and its memory is nearly unused (another tenant may be using it).
Jobs wait in a FIFO queue ordered by ``submitted_at``; ``<root>/gpus.lock`` serialises the
choice.
"""

import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, TypedDict

from remote.core import atomicfile, filelock
from remote.core.jobrecord import JobRecord
from remote.core.layout import Root, last_json_line
from remote.core.spec import JobSpec, SpecLike

QUERY = "index,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu"
FIELDS = ["index", "util", "mem_used", "mem_total", "power", "temp"]
FREE_MEM_MIB = float(os.environ.get("GPUJOB_GPU_FREE_MIB", "1024"))  # below this a GPU counts as idle
FULL_RES_S = 3600.0  # samples younger than this keep full resolution
COMPACT_EVERY = 720  # rewrite gpu.jsonl after this many appended samples

GpuRow = Dict[str, Optional[float]]  # one GPU in a sample: {index, util, mem_used, mem_total, power, temp}


class GpuSample(TypedDict, total=False):
    """One line of gpu.jsonl: ``w`` (the bucket's width in s) only on a mean of older samples."""
    t: float
    w: int
    gpus: List[GpuRow]


class GpuNow(TypedDict):
    """``latest``: the newest sample, cut to what ``ls`` shows."""
    t: object
    now: List[Dict[str, object]]


class HealthCounters(TypedDict):
    ecc: Dict[str, int]  # GPU index -> uncorrected volatile ECC errors
    pending: List[str]  # indexes with a page retirement pending
    xid: Optional[int]  # Xid lines in the kernel log (None: dmesg unreadable)


class Allocation(TypedDict, total=False):
    """``try_allocate``'s answer: ``devices`` when ``ok``, else ``why`` and ``fatal``."""
    ok: bool
    devices: str
    why: str
    fatal: bool


def _num(text: str) -> Optional[float]:
    try:
        v = float(text.strip())
    except ValueError:
        return None
    return int(v) if v.is_integer() else round(v, 1)


def smi(path_prefix: str = "") -> Optional[str]:
    """The ``nvidia-smi`` a job would run (the host's PATH prefix first), or None on a CPU host."""
    import shutil  # here and below: status imports this module for ``latest`` alone (a file's tail)

    search = os.environ.get("PATH", "")
    if path_prefix:
        search = path_prefix + os.pathsep + search
    return shutil.which("nvidia-smi", path=search)


def probe(path_prefix: str = "", timeout: float = 10.0) -> Tuple[Optional[List[GpuRow]], str]:
    """(one sample per GPU, "") ; (None, "") on a CPU host (no nvidia-smi); (None, why) when an
    nvidia-smi is there and fails: the driver is gone (an instance started without its GPUs), which
    is no CPU host, and a job asking for GPUs must not fall back to the CPU there."""
    exe = smi(path_prefix)
    if not exe:
        return None, ""
    import subprocess

    try:
        out = subprocess.run([exe, "--query-gpu=" + QUERY, "--format=csv,noheader,nounits"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "nvidia-smi did not answer within {:.0f} s".format(timeout)
    except (OSError, subprocess.SubprocessError) as e:
        return None, "nvidia-smi could not run ({})".format(e)
    text = out.stdout.decode("utf-8", "replace")
    if out.returncode != 0:
        said = [ln.strip() for ln in (out.stderr.decode("utf-8", "replace") + "\n" + text).splitlines() if ln.strip()]
        return None, "nvidia-smi failed (exit {}){}".format(out.returncode, ": " + said[0][:200] if said else "")
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < len(FIELDS) or _num(parts[0]) is None:
            continue
        gpus.append({k: _num(v) for k, v in zip(FIELDS, parts)})
    return gpus, ""


def on_cpu(path_prefix: str = "") -> bool:
    """True on a CPU host: no nvidia-smi on the job PATH (one that fails is a GPU host in trouble)."""
    return not smi(path_prefix)


def query(path_prefix: str = "", timeout: float = 10.0) -> Optional[List[GpuRow]]:
    """One sample per GPU, or None on a CPU host (no nvidia-smi) or when it fails."""
    return probe(path_prefix, timeout)[0]


def lacking(gpus: Optional[List[GpuRow]], error: str, n: int) -> str:
    """Why a host answering ``probe`` with (gpus, error) can never give a job ``n`` GPUs (-1: all),
    else "" (busy GPUs are no reason: the job queues)."""
    if gpus is None:
        if error:
            return "the job asks for GPUs but this host has no working GPU now ({}): the instance may have " \
                   "been started without its GPUs, or its driver is gone".format(error)
        return "the job asks for GPUs but this host has no nvidia-smi (a CPU host)"
    if not gpus:
        return "the job asks for GPUs but nvidia-smi lists none on this host"
    if n > len(gpus):
        return "the job asks for {} GPU(s); this host has {}".format(n, len(gpus))
    return ""


# ---- gpu.jsonl: one line a sample, {"t": .., "gpus": [{index, util, mem_used, ..}]} -------
def _mean_rows(samples: List[List[GpuRow]]) -> List[GpuRow]:
    """Average per GPU (by index) over several samples."""
    by: Dict[Optional[float], List[GpuRow]] = {}
    for sample in samples:
        for g in sample:
            by.setdefault(g.get("index"), []).append(g)
    out = []
    for idx in sorted(by, key=lambda x: (x is None, x)):
        gs = by[idx]
        row: GpuRow = {"index": idx}
        for k in FIELDS[1:]:
            vals = [v for v in (g.get(k) for g in gs) if isinstance(v, (int, float))]
            row[k] = round(sum(vals) / len(vals), 1) if vals else None
        out.append(row)
    return out


def downsample(records: List[GpuSample], now: float) -> List[GpuSample]:
    """Full resolution for the last hour, 1-minute means for the last day, 10-minute before.

    A week of 5-second samples becomes about 720 + 1380 + 864 lines.
    """
    out: List[GpuSample] = []
    buckets: Dict[Tuple[int, int], List[GpuSample]] = {}
    for rec in records:
        age = now - float(rec.get("t", 0))
        if age < FULL_RES_S:
            out.append(rec)
            continue
        width = 60 if age < 86400 else 600
        buckets.setdefault((width, int(rec["t"]) // width), []).append(rec)
    merged: List[GpuSample] = []
    for (width, b), recs in buckets.items():
        if len(recs) == 1 and recs[0].get("w") == width:
            merged.append(recs[0])
            continue
        merged.append({"t": b * width, "w": width, "gpus": _mean_rows([r.get("gpus") or [] for r in recs])})
    return sorted(merged + out, key=lambda r: r["t"])


# ---- health: uncorrected ECC errors, pending page retirements (nvidia-smi), Xid events (kernel log) ----
HEALTH_QUERY = "index,ecc.errors.uncorrected.volatile.total,retired_pages.pending"
HEALTH_EVERY_S = float(os.environ.get("GPUJOB_GPU_HEALTH_EVERY", "60"))


def health_counters(path_prefix: str = "") -> Optional[HealthCounters]:
    """{"ecc": {index: uncorrected volatile count}, "pending": [indexes], "xid": count of Xid lines or None}."""
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi", path=os.pathsep.join(p for p in (path_prefix, os.environ.get("PATH", "")) if p))
    if not exe:
        return None
    out = {"ecc": {}, "pending": [], "xid": None}  # type: HealthCounters
    try:
        res = subprocess.run([exe, "--query-gpu=" + HEALTH_QUERY, "--format=csv,noheader,nounits"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=10, check=True)
        for line in res.stdout.decode("utf-8", "replace").splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 3 and parts[0].isdigit():
                if parts[1].isdigit():  # [N/A] on cards without ECC
                    out["ecc"][parts[0]] = int(parts[1])
                if parts[2].lower() == "yes":
                    out["pending"].append(parts[0])
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        log = subprocess.run(["dmesg"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=10)
        if log.returncode == 0:
            out["xid"] = log.stdout.count(b"NVRM: Xid")
    except (OSError, subprocess.SubprocessError):
        pass
    return out


class Health:
    """What changed since the attempt began: new uncorrected ECC errors, a page retirement pending,
    new Xid events. The first reading is the baseline (a card's old errors were the preflight's to say)."""

    def __init__(self, path_prefix: str = "") -> None:
        self.prefix = path_prefix
        self.base = None  # type: Optional[HealthCounters]
        self.next_at = 0.0

    def check(self) -> Optional[str]:
        t = time.monotonic()
        if t < self.next_at:
            return None
        self.next_at = t + HEALTH_EVERY_S
        now = health_counters(self.prefix)
        if now is None:
            return None
        if self.base is None:
            self.base = now
            return None
        found = []
        for i, n in sorted(now["ecc"].items()):
            new = n - int(self.base["ecc"].get(i, n))
            if new > 0:
                found.append("GPU {}: {} new uncorrected ECC error(s)".format(i, new))
        for i in now["pending"]:
            if i not in self.base["pending"]:
                found.append("GPU {}: a page retirement is pending (its memory is failing)".format(i))
        if now["xid"] is not None and self.base["xid"] is not None and now["xid"] > self.base["xid"]:
            found.append("{} new Xid event(s) in the kernel log".format(now["xid"] - self.base["xid"]))
        self.base = now  # each error is told once
        return "; ".join(found) or None


class Sampler:
    """A supervisor watcher: samples every ``interval`` s into gpu.jsonl, compacting hourly; checks
    the GPUs' health every ``HEALTH_EVERY_S`` (a new error: ``sup.gpu_error``, which may stop the job)."""

    def __init__(self, path: Path, interval: float, path_prefix: str = "") -> None:
        self.path, self.interval, self.prefix = path, interval, path_prefix
        self.next_at = 0.0
        self.appended = 0
        self.cpu_host = False
        self.last: Optional[List[GpuRow]] = None
        self.health = Health(path_prefix)

    def tick(self, sup: Any = None) -> Optional[str]:
        t = time.time()
        if self.cpu_host or t < self.next_at or self.interval <= 0:
            return None
        self.next_at = t + self.interval
        gpus = query(self.prefix)
        if gpus is None:
            import shutil

            if not shutil.which("nvidia-smi", path=self.prefix + os.pathsep + os.environ.get("PATH", "")):
                self.cpu_host = True  # not an error: nothing to sample
            return None
        self.last = gpus
        with open(str(self.path), "a") as f:
            f.write(json.dumps({"t": int(t), "gpus": gpus}, separators=(",", ":")) + "\n")
        self.appended += 1
        if self.appended >= COMPACT_EVERY:
            self.appended = 0
            compact(self.path, t)
        found = self.health.check()
        if found and sup is not None:
            return sup.gpu_error(found)
        return None


def read_samples(path: Path) -> List[GpuSample]:
    out: List[GpuSample] = []  # gpu.jsonl holds what the Sampler wrote
    try:
        with open(str(path)) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        pass
    return out


def latest(path: Path, since: float = 0.0) -> Optional[GpuNow]:
    """The sampler's newest sample, ``{"t", "now": [{index, util, mem_used}]}``, if taken at or after
    ``since``: what ``ls`` shows per running job, from the file's tail (no nvidia-smi call). A sample's
    ``t`` is whole seconds (the sampler floors it): one taken in the second ``since`` falls in counts
    (compared with the float, the first sample of a run was dropped until the next one came)."""
    rec = last_json_line(path)
    if not isinstance(rec, dict) or not isinstance(rec.get("gpus"), list) or float(rec.get("t") or 0) < int(since):
        return None
    return {"t": rec.get("t"), "now": [{k: g.get(k) for k in ("index", "util", "mem_used")}
                                       for g in rec["gpus"] if isinstance(g, dict)]}


def compact(path: Path, now: float) -> None:
    recs = downsample(read_samples(path), now)
    atomicfile.write(path, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in recs), durable=False)


# ---- allocation and the FIFO queue -----------------------------------------------------
def wanted(spec: SpecLike) -> Optional[int]:
    """How many GPUs the job asks for: None (no request), N, or -1 for 'all'.

    Under ``launcher: torchrun`` on a CPU host, ``gpus: N`` means N CPU processes (gloo):
    no GPU is asked for then.
    """
    spec = JobSpec.of(spec)
    g = spec.gpus
    if g in (None, 0, "0"):
        return None
    prefix = spec.path_prefix
    # ``gpus: auto``: every GPU where there are some, the CPU on a CPU host (no nvidia-smi at all),
    # on every host alike (the laptop's ``local`` as a rented one). A GPU host whose nvidia-smi
    # fails is not a CPU host: no fallback to hours on the CPU there, the job says why
    if g == "auto":
        return None if on_cpu(prefix) else -1
    if spec.cpu_fallback and on_cpu(prefix):  # a job submitted to `local` before `auto` (resumed now)
        return None
    if spec.launcher == "torchrun" and not smi(prefix):
        return None
    if g == "all":
        return -1
    return int(g)


def _held(root: Root, want: Callable[[str, JobRecord], bool]) -> Iterator[Tuple[str, JobRecord]]:
    """(job id, record) of each job of this root that ``want``s and whose supervisor runs
    (remote/core/liveness.py): only those hold GPUs or wait for them."""
    from remote.core import procs
    from remote.core.liveness import liveness

    if not root.jobs.is_dir():
        return
    boot = procs.boot_id()
    for d in root.jobs.iterdir():
        job = root.job(d.name)
        st = job.record()
        if want(d.name, st) and liveness(job, st, boot).holds_gpus:
            yield d.name, st


def taken(root: Root, me: str) -> Dict[str, str]:
    """GPU index → job id, for GPUs held by other live jobs of this root."""
    out: Dict[str, str] = {}
    for job_id, st in _held(root, lambda i, st: i != me and bool(st.cuda_visible_devices and st.gpus_held)):
        for i in str(st.cuda_visible_devices).split(","):
            out[i.strip()] = job_id
    return out


def queue(root: Root) -> List[str]:
    """Jobs waiting for GPUs, first in line first."""
    waiting = [(float(st.submitted_at or 0), job_id)
               for job_id, st in _held(root, lambda i, st: st.state == "queued" and st.waiting_for_gpus)]
    return [j for _, j in sorted(waiting)]


class Lock:
    """``<root>/gpus.lock``: one job at a time decides."""

    def __init__(self, root: Root) -> None:
        self.path = root.root / "gpus.lock"

    def __enter__(self) -> "Lock":
        self.f = open(str(self.path), "a")
        filelock.lock(self.f.fileno())
        return self

    def __exit__(self, *exc: Any) -> None:
        filelock.unlock(self.f.fileno())
        self.f.close()


def try_allocate(root: Root, job_id: str, n: int, path_prefix: str = "") -> Allocation:
    """{"ok": True, "devices": "0,1"} | {"ok": False, "why": ..., "fatal": bool}.

    Called under the lock by the job that is first in the queue.
    """
    gpus, error = probe(path_prefix)
    why = lacking(gpus, error, n)
    if why or gpus is None:
        return {"ok": False, "fatal": True, "why": why}
    total = len(gpus)
    if n == -1:
        n = total
    held = taken(root, job_id)
    free = [str(g["index"]) for g in gpus if str(g["index"]) not in held and (g.get("mem_used") or 0) < FREE_MEM_MIB]
    if len(free) < n:
        busy = total - len(free)
        return {"ok": False, "fatal": False,
                "why": "waiting for {} GPU(s): {} of {} busy ({} held by other jobs)".format(n, busy, total, len(set(held)))}
    return {"ok": True, "devices": ",".join(free[:n])}


def position(root: Root, job_id: str) -> Optional[int]:
    """1-based place in the GPU queue, or None when the job is not waiting."""
    q = queue(root)
    return q.index(job_id) + 1 if job_id in q else None
