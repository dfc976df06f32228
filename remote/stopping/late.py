"""A stop that came after the run command had ended on its own changes nothing: the job finished.

A sweep's budget stop (or an autostop) can reach a trial that has run all its steps: its script
exits 0 by itself, and the stop request lands before the supervisor's next look, or while the
script was writing its last lines. Such a job is ``succeeded`` (a sweep counts it for "best"),
never "stopped by user". The attempt ended on its own when it exited 0 and either

- it ended before the stop was asked (a thread waits for its end without reaping it, so the
  time is the kernel's, compared with the request file's mtime; and the stop verb notes a run
  command it finds already a zombie, for a supervisor too frozen to note the time), or
- no stop signal was sent to it and it watched the stop file through gpujob's runtime helper
  (the templates, the HF/Lightning hook), which marks ``STOP.acted`` when it tells the code to
  stop, and it was not told. Code that polls the stop file itself cannot say whether it acted:
  its exit 0 after a stop is a stop.
"""

import os
import threading
import time
from pathlib import Path
from typing import Optional

from remote.core.layout import JobDir

HELPER_MARK = "gpujob_runtime"  # what the runtime helper writes into STOP.watch


def note_if_ended(job: JobDir, child_pid: object, supervisor_pid: object) -> None:
    """Called by whoever asks for the stop, before asking: a run command that is already a zombie of
    its supervisor (it exited; the supervisor, frozen or busy, has not reaped it yet) had ended on
    its own. Its own clock cannot say so: the supervisor's waiting thread is as frozen as it is."""
    if not isinstance(child_pid, int) or not isinstance(supervisor_pid, int) or child_pid <= 0:
        return
    try:
        with open("/proc/{}/stat".format(child_pid)) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return
    if len(fields) > 1 and fields[0] == "Z" and fields[1] == str(supervisor_pid):
        try:
            job.stop_ended.write_text("{}\n".format(time.time()))
        except OSError:
            pass


class ExitClock:
    """When the process ``pid`` (our child) ended, by the kernel's wait, without reaping it."""

    def __init__(self, pid: int) -> None:
        self.at: Optional[float] = None
        threading.Thread(target=self._wait, args=(pid,), daemon=True).start()

    def _wait(self, pid: int) -> None:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        except (OSError, AttributeError):  # reaped first (Popen.poll): the time is not known
            return
        self.at = time.time()


def _mtime(path: Path) -> Optional[float]:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def asked_at(job: JobDir) -> Optional[float]:
    """When the stop was first asked (the stop file or a stop-after-checkpoint request), if known."""
    times = [t for t in (_mtime(job.stop_file), _mtime(job.stop_after)) if t is not None]
    return min(times) if times else None


def ended_on_its_own(rc: Optional[int], ended_at: Optional[float], job: JobDir, signalled: bool) -> bool:
    if rc != 0:
        return False
    if job.stop_ended.exists():  # seen a zombie when the stop was asked (note_if_ended)
        return True
    asked = asked_at(job)
    if ended_at is not None and asked is not None and ended_at < asked:
        return True
    if signalled:
        return False
    try:
        mark = job.stop_watch.read_text()
    except OSError:  # no helper said how it watches: code that polls the stop file itself left
        return False  # on it before any signal (a stop), as far as anyone can tell
    return mark.startswith(HELPER_MARK) and not job.stop_acted.exists()
