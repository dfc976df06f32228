"""One job page's log: ``Job.logs(follow=True)`` in a thread, its lines queued for the page's stream.

It starts at a byte offset (a reconnect's Last-Event-ID) or the last lines, and starts again
from the last line it had when the job runs again after its log ended (a resume from the page).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from typing import Any, Callable

from gpujob.dashboard.terminal import LogScreen
from gpujob.errors import GpujobError
from gpujob.jsontypes import JSONObject
from gpujob.transport.jobview import JobView

LOG_LINES = 200  # a job page opens at the log's last lines
LINE_SHOWN = 8192  # characters of a row a page gets (its end), once replayed as a terminal shows it
LIVE = ("queued", "pending", "running", "restarting", "requeued")  # core.protocol ACTIVE
RESTART_GAP_S = 5.0  # a follow that fails while the job runs is tried again, not in a loop

Event = tuple[str, JSONObject]


class LogFollower:
    def __init__(self, client_for: Callable[[], Any], host: str, job_id: str, offset: int | None) -> None:
        self.client_for, self.host, self.job_id, self.offset = client_for, host, job_id, offset
        self.lines: queue.Queue[Event] = queue.Queue(maxsize=1000)
        self.cancel = threading.Event()
        self.thread: threading.Thread | None = None
        self.started = 0.0
        self.attempt: Any = None  # the newest attempt the job page saw while this follow ran

    def start(self) -> None:
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._pump, args=(self.offset,), daemon=True,
                                       name=f"log-{self.host}/{self.job_id}")
        self.thread.start()

    def revive(self, doc: JSONObject) -> None:
        """Follow again if the log had ended but the job ran again since (resumed): it runs now, or
        its attempt number grew (an attempt that ended before the page looked still wrote lines)."""
        v = JobView(doc)
        state, attempt = v.state, v.attempt
        if self.attempt is None and isinstance(attempt, int):
            # the attempt this follow began on, however fast that follow ended (a stopped job's last
            # lines): else a resumed attempt that ended before the page saw it run was never followed
            self.attempt = attempt
        if self.thread is None or self.thread.is_alive() or not self.lines.empty():
            if isinstance(attempt, int):
                self.attempt = attempt
            return
        newer = isinstance(attempt, int) and isinstance(self.attempt, int) and attempt > self.attempt
        if newer or (state in LIVE and time.monotonic() - self.started >= RESTART_GAP_S):
            self.attempt = attempt if isinstance(attempt, int) else self.attempt
            self.start()

    def take(self, most: int = 500) -> list[Event]:
        out: list[Event] = []
        while len(out) < most:
            try:
                out.append(self.lines.get_nowait())
            except queue.Empty:
                break
        return out

    def close(self) -> None:
        self.cancel.set()  # the follow ends within half a second, its stream killed

    def _put(self, item: Event) -> None:
        while not self.cancel.is_set():
            try:
                return self.lines.put(item, timeout=0.5)
            except queue.Full:
                continue

    def _pump(self, offset: int | None) -> None:
        try:
            with self.client_for() as c:
                screen = LogScreen()  # the rows this follow wrote: a line may write again on those above
                for chunk in c.job(self.job_id, host=self.host).logs(follow=True, lines=LOG_LINES, as_json=True,
                                                                     offset=offset, cancel=self.cancel):
                    for line in chunk.splitlines():
                        doc = json.loads(line)
                        # as a terminal leaves it, no control character: this line's rows, and how many of the
                        # rows the page shows they replace (tqdm's nested bar moves up, writes over its last row)
                        doc["rewrite"], rows = screen.feed(doc["line"])
                        # the queue holds 1,000 lines: of 1 MiB each, a GB
                        doc["rows"] = [r if len(r) <= LINE_SHOWN else "…" + r[-LINE_SHOWN:] for r in rows]
                        doc["line"] = "\n".join(doc["rows"])
                        self.offset = doc["offset"]  # a restart sends this line again; the page skips it
                        self._put(("line", doc))
            self._put(("end", {}))
        except GpujobError as e:
            self._put(("failed", e.to_json()))
        except Exception as e:  # noqa: BLE001 - the page says what broke; the server goes on
            self._put(("failed", {"error": f"{type(e).__name__}: {e}"}))
