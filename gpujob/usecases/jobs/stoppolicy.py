"""How long ``stop`` waits, and for what: decided from what the user asked (``--wait``,
``--after-checkpoint`` and its ``--max-wait``), so the command line only reads its flags and shows."""

from __future__ import annotations

from gpujob.bundle import import_remote

STOP_WAIT: float = import_remote("core.spec").STOP_WAIT  # s a stop (and a move's stop) waits for the job to end
# --after-checkpoint without --max-wait: the agent waits twice the job's usual interval between checkpoints;
# the command waits this long for that, then STOP_WAIT for the end
AFTER_CHECKPOINT_WAIT = 3600.0


def stop_policy(wait: float | None, after_checkpoint: bool, max_wait: float | None = None
                ) -> tuple[float, float | bool | None]:
    """(seconds to wait for the job to end, the agent's ``after_checkpoint``) of a stop.

    ``after_checkpoint``: the next complete checkpoint first, for at most ``max_wait`` s (None: twice
    the job's usual interval, which the agent knows). ``wait`` when given; else STOP_WAIT, after the
    checkpoint's own wait (``max_wait``, else AFTER_CHECKPOINT_WAIT) when a checkpoint comes first."""
    after: float | bool | None = None
    if after_checkpoint:
        after = max_wait if max_wait is not None else True
    if wait is None:
        wait = STOP_WAIT if after is None else (after if after is not True else AFTER_CHECKPOINT_WAIT) + STOP_WAIT
    return wait, after
