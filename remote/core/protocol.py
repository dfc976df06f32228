"""What the laptop and the agent must agree on (standard library only, Python 3.8+).

The job states, the verbs the agent's kept ``serve`` process answers, durations and sizes, and the retry
schedule. The agent imports this file as ``remote.core.protocol``, the laptop through
``gpujob.bundle.import_remote("core.protocol")``; so it imports nothing from ``remote/``. The state
strings are what ``status.json`` and every ``--json`` output say: renaming one breaks scripts.
"""

import math
import re
from typing import Any, Optional

# ---- job states -----------------------------------------------------------------------------

QUEUED = "queued"
RUNNING = "running"
RESTARTING = "restarting"
SUCCEEDED = "succeeded"
FAILED = "failed"
STOPPED = "stopped"
AUTOSTOPPED = "autostopped"
LOST = "lost"  # concluded, not written by a supervisor: stale heartbeat and its pid gone
MOVED = "moved"  # the job went on on another host (``gpujob move``)
# a job on a Slurm host (remote/core/slurmq.py): waiting in Slurm's queue (its reason beside it), or ended by
# Slurm to be started again (a preemption, a requeue, the time limit): both live, Slurm decides when they run
PENDING = "pending"
REQUEUED = "requeued"

ACTIVE = (QUEUED, PENDING, RUNNING, RESTARTING, REQUEUED)  # a supervisor owns the job, or Slurm will start one
ENDINGS = (SUCCEEDED, FAILED, STOPPED, AUTOSTOPPED)  # how a supervisor's run ends (each one announced)
TERMINAL = ENDINGS + (LOST, MOVED)  # no supervisor runs the job
# Terminal and staying so: a lost job is still to be announced, and ``gpujob resume`` may revive it.
SETTLED = tuple(s for s in TERMINAL if s != LOST)
STATES = ACTIVE + TERMINAL
# The one state a multi-node job shows: its worst node's.
WORST_FIRST = (FAILED, LOST, RESTARTING, REQUEUED, RUNNING, QUEUED, PENDING, STOPPED, AUTOSTOPPED, SUCCEEDED)

# ---- verbs ----------------------------------------------------------------------------------

# The quick read-only verbs the kept ``serve`` process answers (one JSON line in, one out); the
# laptop sends these on the multiplexer's kept connection and every other verb as its own command.
SERVED = ("hello", "status", "watch", "port", "agentlog", "gpus", "manifest", "receive", "unlease")

# ---- waits ----------------------------------------------------------------------------------

# How long a submit waits for another submit of its project to take its snapshot (the sync lease):
# the laptop waits this long for a kept agent's answer, an agent's own ``sync`` process in itself.
LEASE_WAIT = 600.0

# ---- durations ------------------------------------------------------------------------------

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(value: Any) -> float:
    """Seconds of ``90s``, ``30m``, ``8h``, ``1d`` or a plain number; ValueError naming the accepted forms."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 90s, 30m, 8h")
    if isinstance(value, (int, float)):
        seconds = float(value) if -1e300 < value < 1e300 else math.inf
    else:
        m = _DURATION.match(str(value))
        if not m:
            raise ValueError("{!r} is not a duration: write 90s, 30m, 8h or 1d".format(str(value)[:40]))
        seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not math.isfinite(seconds):
        raise ValueError("{!r} is not a finite duration: write 90s, 30m, 8h or 1d".format(str(value)[:40]))
    return seconds


# ---- sizes ----------------------------------------------------------------------------------

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*$", re.I)
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
MAX_SIZE = float(1 << 60)


def parse_size(value: Any) -> int:
    """Bytes of ``5GB``, ``500MB``, ``2G`` or a plain number of bytes (units are powers of 1024)."""
    if isinstance(value, bool):
        raise ValueError("expected a size like 5GB")
    if isinstance(value, (int, float)) and -1e300 < value < 1e300:
        return int(value)
    m = _SIZE.match(str(value))
    n = float(m.group(1)) * _SIZE_UNITS[m.group(2).upper()] if m else math.nan
    if not math.isfinite(n) or n > MAX_SIZE:
        raise ValueError("{!r} is not a size: write 5GB, 500MB".format(str(value)[:40]))
    return int(n)


def format_duration(seconds: Optional[float]) -> str:
    """``1h02m`` style, for tables; ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return "{}s".format(s)
    if s < 3600:
        return "{}m{:02d}s".format(s // 60, s % 60)
    return "{}h{:02d}m".format(s // 3600, (s % 3600) // 60)


# ---- retries --------------------------------------------------------------------------------


def backoff(attempt: int, base: float, cap: float = math.inf, factor: float = 2.0) -> float:
    """Seconds to wait after failed try number ``attempt`` (1, 2, ...): ``base``, times ``factor``
    for each further try, at most ``cap``. The laptop's waits (gpujob/backoff.py) are this one."""
    return min(cap, base * factor ** min(max(0, attempt - 1), 64))  # a bounded exponent: never an overflow
