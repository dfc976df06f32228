"""Evidence of the kernel's out-of-memory killer: the cgroup counter and the kernel log.

A SIGKILL is blamed on the OOM killer only on evidence: the container's memory cgroup counted
an ``oom_kill`` during the attempt, or the kernel log recorded one in the attempt's time for
a process of this container's cgroup or of the job. ``GPUJOB_MEMORY_EVENTS`` and
``GPUJOB_KMSG`` name other files to read (tests; hosts with an unusual layout).
"""

import os
import re
from pathlib import Path
from typing import Iterable, List, Optional

CGROUP_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")
_KILL = re.compile(r"oom-kill:.*?\btask_memcg=([^,\s]*).*?\bpid=(\d+)|Killed process (\d+)")


def oom_kills() -> Optional[int]:
    """The OOM killer's count for this container's memory cgroup (v2, then v1), or None."""
    override = os.environ.get("GPUJOB_MEMORY_EVENTS")
    for path in ([override] if override else CGROUP_FILES):
        try:
            for line in Path(path).read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == "oom_kill":
                    return int(v)
        except (OSError, ValueError):
            continue
    return None


def _own_cgroup() -> str:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            parts = line.split(":", 2)
            if len(parts) == 3 and (parts[0] == "0" or "memory" in parts[1].split(",")):
                return parts[2]
    except OSError:
        pass
    return ""


def _kmsg_records() -> Optional[List[str]]:
    """The kernel log's records (``/dev/kmsg`` read without blocking), or None when unreadable."""
    path = os.environ.get("GPUJOB_KMSG") or "/dev/kmsg"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    out = []  # type: List[str]
    try:
        while len(out) < 100000:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError:  # EPIPE: records overwritten while reading; go on with the next
                continue
            if not rec:
                break
            out.extend(rec.decode("utf-8", "replace").splitlines())
    finally:
        os.close(fd)
    return out


def kernel_log_kill(since_monotonic: float, pids: Iterable[int]) -> Optional[bool]:
    """Whether the kernel log shows an OOM kill after ``since_monotonic`` (time.monotonic()) of a
    process in ``pids`` or in this container's cgroup; None when the log cannot be read."""
    records = _kmsg_records()
    if records is None:
        return None
    wanted = {int(p) for p in pids if p}
    cgroup = _own_cgroup()
    for line in records:
        head, sep, msg = line.partition(";")
        fields = head.split(",")
        if not sep or len(fields) < 3:
            continue
        try:
            t = int(fields[2]) / 1e6
        except ValueError:
            continue
        if t < since_monotonic - 1.0:
            continue
        m = _KILL.search(msg)
        if not m:
            continue
        memcg, pid = m.group(1), int(m.group(2) or m.group(3))
        if pid in wanted or (memcg is not None and cgroup not in ("", "/") and
                             (memcg == cgroup or memcg.startswith(cgroup.rstrip("/") + "/"))):
            return True
    return False


class Watch:
    """One attempt's evidence: the counter at its start, its start time, the job's pids seen."""

    def __init__(self) -> None:
        import time

        self.before = oom_kills()
        self.since = time.monotonic()
        self.pids = set()  # type: set

    def killed(self) -> Optional[bool]:
        """True on evidence of an OOM kill during the attempt, False when none, None when
        neither the counter nor the kernel log could be read."""
        after = oom_kills()
        if self.before is not None and after is not None and after > self.before:
            return True
        logged = kernel_log_kill(self.since, self.pids)
        if logged:
            return True
        return False if (after is not None and self.before is not None) or logged is False else None
