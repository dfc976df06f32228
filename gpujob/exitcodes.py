"""Exit codes a script can test (docs/cli.md has the table).

A job's outcome (``tail -f``, ``submit --follow``, ``status JOB --exit-code``) never collides
with the command's own failures: 2 is a usage error or a refusal gpujob explained (bad job
file, unknown host or job, the agent said no), 3 a connection that failed.
"""

from __future__ import annotations

SUCCEEDED = 0
FAILED = 1
USAGE = 2  # argparse's own, and every GpujobError but a connection failure
CONNECT = 3
STOPPED = 4
AUTOSTOPPED = 5
LOST = 6
NOT_FINISHED = 7  # status --exit-code on a queued, running or restarting job
INTERRUPTED = 130  # Ctrl-C; a followed job goes on

BY_STATE = {"succeeded": SUCCEEDED, "failed": FAILED, "stopped": STOPPED, "autostopped": AUTOSTOPPED, "lost": LOST}


def for_state(state: str | None) -> int:
    """The exit code that reports a job in ``state``."""
    return BY_STATE.get(state or "", NOT_FINISHED)
