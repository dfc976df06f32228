"""A job's log by time: the supervisor's size index ``output.log.idx`` (``T SIZE`` per heartbeat:
SIZE bytes existed at T), written by ``index_log_size``, and ``offset_since`` that reads it (with
the attempt markers' timestamps) to start a log at a moment (``gpujob tail --since``)."""

import re
import time
from pathlib import Path
from typing import Dict

from remote.core.layout import JobDir

MARKER = re.compile(rb"^==> gpujob: .*\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]$")


def _parse_marker_time(stamp: bytes) -> float:
    return time.mktime(time.strptime(stamp.decode(), "%Y-%m-%d %H:%M:%S"))


def offset_since(job: JobDir, since: float) -> int:
    """The byte offset of the first line written at or after ``since`` (epoch seconds).

    Sources, finest first: the supervisor's size index ``output.log.idx`` (``T SIZE`` per
    heartbeat: SIZE bytes existed at T), then the attempt markers' timestamps. The offset
    is the largest known position written before ``since``, moved to a line start; a
    log untouched since then gives its end.
    """
    log = job.log
    try:
        st = log.stat()
    except OSError:
        return 0
    if st.st_mtime < since:
        return st.st_size
    best = 0
    try:
        with open(str(job.path / "output.log.idx")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and float(parts[0]) <= since:
                    best = max(best, int(parts[1]))
    except (OSError, ValueError):
        pass
    if not best:  # no index: the newest marker before since
        pos = 0
        with open(str(log), "rb") as f:
            for raw in f:
                m = MARKER.match(raw.rstrip(b"\n"))
                if m and _parse_marker_time(m.group(1)) <= since:
                    best = pos
                pos += len(raw)
    return _line_start(log, min(best, st.st_size))


def _line_start(path: Path, offset: int) -> int:
    """``offset`` if a line starts there, else the start of the next line."""
    if offset <= 0:
        return 0
    with open(str(path), "rb") as f:
        f.seek(offset - 1)
        pos = offset - 1
        while True:
            block = f.read(65536)
            if not block:
                return pos
            i = block.find(b"\n")
            if i >= 0:
                return pos + i + 1
            pos += len(block)


_indexed: Dict[str, int] = {}  # job folder -> the log size last indexed


def index_log_size(job: JobDir) -> None:
    """Append ``T SIZE`` to ``output.log.idx`` when the log grew (the supervisor's heartbeat)."""
    try:
        size = job.log.stat().st_size
    except OSError:
        return
    key = str(job.path)
    if _indexed.get(key) == size:
        return
    _indexed[key] = size
    try:
        with open(str(job.path / "output.log.idx"), "a") as f:
            f.write("{:.3f} {}\n".format(time.time(), size))
    except OSError:
        pass
