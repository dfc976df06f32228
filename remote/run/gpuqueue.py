"""The host's FIFO queue for GPUs: an attempt waits its turn until the GPUs its job asks for are free."""

import os
import time
from typing import Callable, Optional

from remote.core.layout import JobDir, Root
from remote.core.spec import JobSpec
from remote.run.record import Record

QUEUE_POLL = float(os.environ.get("GPUJOB_QUEUE_POLL", "5"))
TICK = 0.25


def take_gpus(root: Root, job: JobDir, spec: JobSpec, record: Record,
              stop_requested: Callable[[], Optional[str]]) -> Optional[str]:
    """Wait in the host's FIFO queue until the GPUs the job asks for are free.

    Returns None once CUDA_VISIBLE_DEVICES is set, or the reason the job cannot run.
    """
    from remote.host import gpus

    n = gpus.wanted(spec)
    if n is None:
        if spec.gpus == "auto":  # said where the user looks (tail, --follow), on any host
            record.log_marker("no GPU on this host (no nvidia-smi): gpus: auto runs the job on its CPU")
        return None
    record.set_state("queued", waiting_for_gpus=True, gpus_held=False, cuda_visible_devices=None)
    told = None
    while True:
        if stop_requested():
            return "stopped while queued"
        with gpus.Lock(root):
            first = (gpus.queue(root) or [job.id])[0] == job.id
            res = gpus.try_allocate(root, job.id, n, spec.path_prefix) if first else None
            if res and res["ok"]:
                record.save(cuda_visible_devices=res["devices"], gpus_held=True, waiting_for_gpus=False,
                            queue_reason=None)
                job.event("gpus", devices=res["devices"])
                return None
        if res and res.get("fatal"):
            return res["why"]
        why = res["why"] if res else "waiting behind earlier jobs in this host's queue"
        if why != told:
            record.log_marker(why)
            told = why
        record.save(queue_reason=why)
        deadline = time.monotonic() + QUEUE_POLL
        while time.monotonic() < deadline and not stop_requested():
            record.heartbeat()
            time.sleep(TICK)
