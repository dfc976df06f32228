"""``output.log.idx``: ``T SIZE`` lines saying how long the job's log was when (``tail --since`` reads them)."""

import time
from typing import Dict

from remote.core.layout import JobDir

_indexed: Dict[str, int] = {}


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
