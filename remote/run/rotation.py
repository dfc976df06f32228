"""Checkpoint rotation beside a running attempt: old checkpoints beyond ``checkpoint_keep`` go.

``checkpoints.rotate`` never deletes the newest complete checkpoint, the one the attempt resumed
from, one still being written (open for writing by a process of the job), nor Lightning's
``last*.ckpt``; what the mirror is sending stays until it is up.
"""

from pathlib import Path
from typing import Callable, List, Optional

from remote.core.layout import agent_log
from remote.run.watchers import JobContext

ROTATE_EVERY = 5.0  # seconds between checkpoint rotations while a job runs


def _checkpoints():  # type: ignore[no-untyped-def]
    from remote.ckpt import checkpoints

    return checkpoints


class Rotator:
    """A watcher: every ROTATE_EVERY s, delete old checkpoints beyond ``keep``."""

    name = "checkpoint rotation"
    interval = ROTATE_EVERY

    def __init__(self, ctx: JobContext, ckpt_dir: Path, keep: int, pattern: Optional[str] = None,
                 sending: Callable[[], List[str]] = lambda: []) -> None:
        self.ctx, self.ckpt_dir, self.keep, self.pattern, self.next_at = ctx, ckpt_dir, keep, pattern, 0.0
        self.sending = sending  # the checkpoints the mirror is uploading now

    def tick(self, now: float) -> Optional[str]:
        if now >= self.next_at:
            self.next_at = now + ROTATE_EVERY
            self.rotate()
        return None

    def rotate(self) -> None:
        if self.keep <= 0 or not self.ckpt_dir.is_dir():
            return
        attempts = self.ctx.status.attempts
        resume = attempts[-1].get("resume") if attempts else None
        # what the mirror is sending stays until it is up (a slow upload would lose its source)
        sending = self.sending()
        try:
            deleted = _checkpoints().rotate(self.ckpt_dir, self.keep, self.pattern, pids=self.ctx.job_pids,
                                            protect=([resume] if resume else []) + sending)
        except Exception as e:  # never let housekeeping take the job down
            agent_log(self.ctx.root, "rotation in {} failed: {}".format(self.ckpt_dir, e))
            return
        if deleted:
            self.ctx.job.event("rotated", deleted=[p.name for p in deleted])
