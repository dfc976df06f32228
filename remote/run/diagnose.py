"""Why a run failed, from its exit status and the tail of its log: a cause and a remedy."""

import math
import re
import signal
from pathlib import Path
from typing import Dict, List, Optional

from remote.core.layout import last_json_line, tail_lines

ATTEMPT_START = re.compile(r"^==> gpujob: attempt \d+ started")

# (cause, pattern, summary, remedy); the first match in the log tail wins.
RULES = [
    ("oom", r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError: CUDA|CUBLAS_STATUS_ALLOC_FAILED",
     "CUDA out of memory",
     "lower the per-device batch and raise gradient accumulation (retry: {on_oom: halve_batch} does it), "
     "or turn on gradient checkpointing / bf16"),
    ("nccl", r"NCCL error|NCCL WARN|ProcessGroupNCCL.*[Tt]imeout|Watchdog caught collective operation timeout|"
             r"ncclInternalError|ncclUnhandledCudaError|ncclSystemError|DistBackendError|"
             r"Timed out (?:after|waiting)[^\n]*(?:collective|NCCL|store)",
     "NCCL communication error or timeout",
     "one rank died or hung: read the first rank's traceback; set NCCL_DEBUG=INFO; check every GPU is visible"),
    ("nan", r"(?i)\bloss\b[^\n]{0,40}\b(nan|inf)\b|non-finite loss|Loss is NaN",
     "the loss became NaN/inf",
     "lower the learning rate, add warmup and gradient clipping, or use bf16 instead of fp16"),
    ("disk_full", r"No space left on device|Errno 28|disk quota exceeded",
     "the disk is full",
     "free space (gpujob doctor shows each disk) or keep fewer checkpoints (checkpoint: {keep: 2})"),
    # torch.save meeting a full disk says neither ENOSPC nor "space": its zip writer's own words
    ("write_failed", r"PytorchStreamWriter failed writing|inline_container\.cc:\d+\]\s*\.\s*unexpected pos \d+ vs \d+",
     "torch.save could not write the checkpoint (most often a full disk or quota)",
     "check free space (gpujob doctor shows each disk; status names what to delete) or keep fewer checkpoints "
     "(checkpoint: {keep: 2}); the newest complete checkpoint is what a resume uses"),
    ("missing_module", r"ModuleNotFoundError: No module named '([^']+)'|ImportError: No module named ([\w.]+)",
     "a Python module is missing",
     "add it to requirements.txt (or setup:) and submit again; check python: picks the right environment"),
    ("missing_script", r"can't open file '([^']+)': \[Errno 2\] No such file or directory",
     "the script does not exist",
     "fix the file name in run: (the job's code folder is the project folder as synced)"),
    ("missing_file", r"FileNotFoundError: \[Errno 2\] No such file or directory: '([^']+)'",
     "a file is missing",
     "check the path; data: entries land under $GPUJOB_DATA_DIR"),
    ("command_not_found", r"command not found|No such file or directory: 'python'",
     "the run command was not found",
     "check run: (is the interpreter on PATH under bash -l?)"),
]


def _did_you_mean(code: Path, missing: str, remedy: str) -> str:
    """``remedy`` with the scripts the code folder does hold, the closest first."""
    import difflib

    try:
        have = sorted(p.name for p in code.iterdir() if p.suffix in (".py", ".sh") and p.is_file())
    except OSError:
        return remedy
    if not have:
        return remedy
    close = difflib.get_close_matches(Path(missing).name, have, n=1, cutoff=0.5)
    return "{}{}; the code folder holds {}".format(
        remedy, " (did you mean {}?)".format(close[0]) if close else "", ", ".join(have[:12]))


def _last_frame(lines: List[str]) -> Optional[str]:
    frame = None
    for line in lines:
        m = re.match(r'\s*File "([^"]+)", line (\d+), in (\S+)', line)
        if m:
            frame = "{}:{} in {}".format(m.group(1), m.group(2), m.group(3))
    return frame


def last_attempt(lines: List[str]) -> List[str]:
    """The lines after the newest ``attempt N started`` marker: an earlier attempt's error
    must not be blamed for this one's end."""
    for i in range(len(lines) - 1, -1, -1):
        if ATTEMPT_START.match(lines[i]):
            return [ln for ln in lines[i + 1:] if not ln.startswith("==> gpujob:")]
    return [ln for ln in lines if not ln.startswith("==> gpujob:")]


def _bad_loss(metrics: Optional[Path]) -> Optional[str]:
    """'loss=nan' when the last metrics record has a non-finite loss."""
    rec = last_json_line(metrics) if metrics else None
    for k, v in (rec or {}).items():
        if "loss" in k and isinstance(v, float) and not math.isfinite(v):
            return "{}={}".format(k, v)
    return None


def _signal(sig: int, oom_killed: Optional[bool], lines: List[str]) -> Dict[str, object]:
    """A signal gpujob did not send (its own stops are not diagnosed). The OOM killer is named
    only on evidence (see remote/host/oom.py)."""
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = "signal {}".format(sig)
    summary = "killed by {} (exit {}) from outside gpujob".format(name, 128 + sig)
    if sig == 9:
        summary += "; the kernel's out-of-memory killer left no trace" if oom_killed is False else \
            "; no cgroup counter or kernel log here tells whether the out-of-memory killer did it"
    return {"cause": "signal", "summary": summary,
            "remedy": "something outside gpujob killed it (the platform, a watchdog, kill); with retry.max_restarts "
                      "it restarts from the newest complete checkpoint",
            "where": _last_frame(lines), "line": None, "gpu": False}


# torchrun's report when a worker fails: the first failure's rank and exit code (-N: signal N)
TORCHRUN_ROOT = re.compile(r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)
RANK_PREFIX = re.compile(r"^\[(?:default)?rank\d+\]:\s*")


def _torchrun_root(text: str, oom_killed: Optional[bool], lines: List[str]) -> Optional[Dict[str, object]]:
    """A worker torchrun saw die by a signal (kill -9 of one rank, the OOM killer): the cause is that
    signal, not torchrun's own ChildFailedError (which would count as an error for ``retry.on``)."""
    m = TORCHRUN_ROOT.search(text)
    if not m or int(m.group(2)) >= 0:
        return None
    found = _signal(-int(m.group(2)), oom_killed, lines)
    found["summary"] = "torchrun worker rank {} {}".format(m.group(1), found["summary"])
    return found


def diagnose(log: Path, rc: Optional[int], metrics: Optional[Path] = None,
             oom_killed: Optional[bool] = None) -> Dict[str, object]:
    """{cause, summary, remedy, where, line, gpu}: cause is a retry key (error, oom, nan, nccl, signal, ...).

    ``oom_killed``: whether the OOM killer is known to have struck during the attempt (the
    cgroup counter grew or the kernel log says so; None: nothing could be read).
    ``gpu`` is True for a CUDA out-of-memory (what ``on_oom: halve_batch`` acts on).
    """
    lines = last_attempt(tail_lines(log, 300, 262144))
    text = "\n".join(lines)
    for cause, pattern, summary, remedy in RULES:
        m = re.search(pattern, text)
        if m:
            detail = next((g for g in m.groups() if g), None) if m.groups() else None
            line = next((ln.strip() for ln in reversed(lines) if re.search(pattern, ln)), None)
            if cause == "missing_script" and detail:
                remedy = _did_you_mean(log.parent / "code", detail, remedy)
            return {"cause": cause, "summary": summary + (": " + detail if detail else ""), "remedy": remedy,
                    "where": _last_frame(lines), "line": line, "gpu": cause == "oom"}
    bad = _bad_loss(metrics)
    if bad:
        nan = RULES[2]
        return {"cause": "nan", "summary": "{} ({})".format(nan[2], bad), "remedy": nan[3],
                "where": _last_frame(lines), "line": None, "gpu": False}
    worker = _torchrun_root(text, oom_killed, lines)
    if worker:
        return worker
    if rc in (137, -9) and oom_killed:
        return {"cause": "oom", "summary": "killed by SIGKILL (exit 137): the kernel's out-of-memory killer",
                "remedy": "use less host RAM: fewer DataLoader workers, smaller shuffle buffers, memory-mapped data",
                "where": _last_frame(lines), "line": None, "gpu": False}
    if rc is not None and (rc < 0 or rc > 128):
        return _signal(-rc if rc < 0 else rc - 128, oom_killed, lines)
    # a torchrun worker's own error (its lines start "[rankN]: "), not torchrun's ChildFailedError
    errors = [RANK_PREFIX.sub("", ln.strip()) for ln in lines]
    errors = [ln for ln in errors if re.match(r"^\w+(\.\w+)*(Error|Exception)\b", ln)]
    tb_line = next((ln for ln in reversed(errors) if "ChildFailedError" not in ln), errors[-1] if errors else None)
    return {"cause": "error", "summary": tb_line or "exit code {}".format(rc),
            "remedy": "read the traceback: gpujob tail {} -n 50".format(log.parent.name), "where": _last_frame(lines), "line": tb_line,
            "gpu": False}
