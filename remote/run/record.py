"""The supervisor's record of its job: ``status.json`` (written atomically, with a heartbeat), state
changes in ``events.jsonl`` and the ``==> gpujob:`` markers in ``output.log``."""

import os
import time
from typing import Any

from remote.core import locks
from remote.core.jobrecord import JobRecord
from remote.core.layout import JobDir, Root, agent_log, now
from remote.jobs.logindex import index_log_size

HEARTBEAT = float(os.environ.get("GPUJOB_HEARTBEAT", "5"))
# fields of an attempt's end that must not outlive it: a recovered job shows none of them
ATTEMPT_END_FIELDS = ("reason", "exit_code", "lost_reason", "diagnosis", "remedy", "next_attempt_at",
                      "stopping", "killed", "survivors")


class Record:
    """status.json as this supervisor keeps it (``status``, saved with a heartbeat), and the log's markers."""

    def __init__(self, root: Root, job: JobDir) -> None:
        self.root, self.job = root, job
        self.status: JobRecord = job.record()
        self.last_beat = 0.0

    def save(self, **changes: Any) -> None:
        self.status.update(**changes)
        self.status.heartbeat = now()
        with locks.job_lock(self.job.path):
            self.job.write_record(self.status)
        self.last_beat = time.monotonic()
        index_log_size(self.job)  # T SIZE of output.log, for tail --since

    def set_state(self, state: str, **changes: Any) -> None:
        old = self.status.state
        self.save(state=state, **changes)
        if old != state:
            self.job.event("state", state=state, **{k: v for k, v in changes.items() if k in ("reason", "exit_code", "attempt")})

    def heartbeat(self) -> None:
        if time.monotonic() - self.last_beat >= HEARTBEAT:
            try:
                self.save()
            except OSError as e:  # a full disk: skip this beat (the final state uses the reserve)
                self.last_beat = time.monotonic()
                agent_log(self.root, "{}: heartbeat not written: {}".format(self.job.id, e))

    def log_marker(self, text: str) -> None:
        try:
            with open(str(self.job.log), "a") as f:
                f.write("==> gpujob: {} [{}]\n".format(text, time.strftime("%Y-%m-%d %H:%M:%S")))
        except OSError as e:  # a full disk: the marker is lost, the job's life goes on
            agent_log(self.root, "{}: could not write a log marker: {}".format(self.job.id, e))

    def new_attempt(self) -> None:
        """The previous attempt's end is history (attempts, events)."""
        self.status.drop(*ATTEMPT_END_FIELDS)
