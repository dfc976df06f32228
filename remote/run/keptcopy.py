"""The kept copy (``checkpoint.backup``) as the supervisor uses it: remote/ckpt/keepcopy.py's Keeper as a
watcher, its copy put back before an attempt starts, its end awaited when the job ends."""

from pathlib import Path
from typing import Optional

from remote.run.watchers import JobContext


class KeptCopy:
    """A watcher: a copy of each checkpoint file the script rewrites in place (every KEEP_EVERY s)."""

    name = "kept copy"

    def __init__(self, ctx: JobContext, ckpt_dir: Path, pattern: Optional[str]) -> None:
        from remote.ckpt import keepcopy

        self.ctx, self.pattern = ctx, pattern
        self.interval = keepcopy.KEEP_EVERY
        self.keeper = keepcopy.Keeper(ctx.job, ckpt_dir, pattern, ctx.log_marker, say=self.given_up)

    def tick(self, now: float) -> Optional[str]:
        return self.keeper.tick(self.ctx)  # due by its own clock; reads the job's pids from the context

    def wait(self, timeout: Optional[float] = None) -> None:
        """A copy under way lands (or is dropped) first."""
        self.keeper.wait(timeout)

    def given_up(self, text: str) -> None:
        """The kept copy made way for the job's own writes: status shows it from the next beat on."""
        self.ctx.status.kept_copy = text
        self.ctx.job.event("kept_copy_given_up", reason=text)

    def restore(self, attempt: int) -> None:
        """A checkpoint file rewritten in place and cut short by the kill that ended the last attempt (or
        the host's end) gets its kept last complete version back before the attempt starts."""
        from remote.ckpt import keepcopy

        self.wait()
        try:
            restored = keepcopy.restore(self.ctx.job.path, self.ctx.ckpt_dir(), self.pattern)
        except OSError as e:  # a full disk: the attempt starts as it would have without the copy
            self.ctx.log_marker("could not restore the kept copy of a checkpoint: {}".format(e))
            return
        for rel, step in restored:
            said = "{} restored from the copy kept of its last complete version{} (the save in place was cut " \
                   "short or the file is gone)".format(rel, " (step {})".format(step) if step is not None else "")
            self.ctx.log_marker(said)
            self.ctx.status.restored = "before attempt {}: {}".format(attempt, said)
            self.ctx.job.event("restored", name=rel, step=step)
