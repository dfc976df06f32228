"""What the auto-stop policies look at: the progress of the job's log and metrics, and the GPUs'
utilisation (the GPU sampler's gpu.jsonl, else nvidia-smi asked here)."""

import json
import os
import shutil
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional

from remote.core.jsontypes import JSON, JSONObject


def read_gpu_samples(path: str, since: float) -> List[Dict[str, Any]]:
    """Samples of ``gpu.jsonl`` (``{"t":..,"gpus":[{"util":..}]}`` a line) taken at or after ``since``."""
    out = []  # type: List[Dict[str, Any]]
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - (1 << 20)))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return out
    for line in data.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and float(rec.get("t") or 0) >= since:
            out.append(rec)
    return out


def utils_of(sample: JSONObject) -> List[float]:
    """GPU utilisations of one sample: ``{"gpus":[{"util":..}]}`` or remote/host/gpus.py's ``{"g":[[i, util, ..]]}``."""
    out = []  # type: List[float]
    gpus, rows = sample.get("gpus"), sample.get("g")
    for g in gpus if isinstance(gpus, list) else []:  # (anything else holds no GPU either)
        util = g.get("util") if isinstance(g, dict) else None
        if isinstance(util, (int, float)):
            out.append(float(util))
    for row in rows if isinstance(rows, list) else []:
        util = row[1] if isinstance(row, list) and len(row) > 1 else None
        if isinstance(util, (int, float)):
            out.append(float(util))
    return out


def nvidia_smi_sample(path_prefix: str = "") -> Optional[JSONObject]:
    """One sample from ``nvidia-smi`` (``{"t":..,"gpus":[..]}``), or None without one."""
    search = os.environ.get("PATH", "")
    exe = shutil.which("nvidia-smi", path=(path_prefix + os.pathsep + search) if path_prefix else search)
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu",
             "--format=csv,noheader,nounits"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=10,
        ).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError):
        return None
    gpus: List[JSON] = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2:
            continue

        def f(i: int, parts: List[str] = parts) -> Optional[float]:
            try:
                return float(parts[i])
            except (IndexError, ValueError):
                return None
        gpus.append({"index": int(f(0) or 0), "util": f(1), "mem_used": f(2), "mem_total": f(3), "power": f(4),
                     "temp": f(5)})
    return {"t": time.time(), "gpus": gpus} if gpus else None


class Progress:
    """What has changed in the job's output.log and metrics.jsonl, and when."""

    def __init__(self, log: str, metrics: str, resolve: Optional[Callable[[], str]] = None) -> None:
        self.log, self.metrics = log, metrics
        self.resolve = resolve  # the job's active metrics file (the metrics file, TensorBoard's, the log's)
        self.log_size = self._size(log)
        self.metrics_size = self._size(metrics)
        self.log_changed = self.metrics_changed = time.time()
        self.step = None  # type: Any
        self.step_changed = time.time()
        self.records = []  # type: List[Dict[str, Any]]
        self._offset = 0

    @staticmethod
    def _size(path: str) -> int:
        try:
            return os.path.getsize(path)
        except OSError:
            return 0

    def poll(self, now: float) -> None:
        path = self.resolve() if self.resolve is not None else self.metrics
        if path != self.metrics:  # another source took precedence: read it from its start
            self.metrics, self._offset, self.records, self.metrics_size = path, 0, [], 0
        s = self._size(self.log)
        if s != self.log_size:
            self.log_size, self.log_changed = s, now
        s = self._size(self.metrics)
        if s != self.metrics_size:
            self.metrics_size, self.metrics_changed = s, now
        self._read_metrics(now)

    def _read_metrics(self, now: float) -> None:
        try:
            with open(self.metrics, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n")
        if end < 0:
            return
        self._offset += end + 1
        for line in data[:end].decode("utf-8", "replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                self.records.append(rec)
                step = rec.get("step", rec.get("global_step"))
                if step is not None and step != self.step:
                    self.step, self.step_changed = step, now
        del self.records[:-10000]


def active_metrics(job_path: str) -> str:
    """The job's metrics file by precedence (imported here: the laptop loads this module by path alone)."""
    from pathlib import Path

    from remote.core.layout import JobDir
    from remote.metrics import metricsrc

    return str(metricsrc.active(JobDir(Path(job_path)))[1])
