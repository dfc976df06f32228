"""The dashboard's word on powered-off hosts: each one's countdown to its platform's release and its
checkpoints only there (``Hub.rows``' ``disks``), and the 3- and 1-day warnings sent while it runs
(gpujob/usecases/disks/). Read from the profiles, the job index and the ledger: no host is asked."""

from __future__ import annotations

import sys
import threading
from typing import Callable

from gpujob.errors import GpujobError
from gpujob.usecases.disks.countdown import Release

EVERY_S = 60.0  # the countdown moves by the hour; the warnings' own throttle is disks.json's


class DiskWatch:
    """A thread that keeps ``shown`` (host → its countdown) and calls ``changed`` when it differs."""

    def __init__(self, changed: Callable[[], None], stopped: threading.Event) -> None:
        self.changed, self.stopped = changed, stopped
        self.shown: dict[str, Release] = {}
        self.thread = threading.Thread(target=self._run, daemon=True, name="disks")

    def start(self) -> None:
        self.thread.start()

    def look(self) -> None:
        from gpujob.usecases.disks.warn import check, countdowns

        try:
            now = countdowns(holdings=True)
        except GpujobError:  # hosts.yaml unreadable: the jobs page says what each host does
            now = {}
        def steady(d: dict[str, Release]) -> dict[str, dict[str, object]]:  # the seconds move every look
            return {h: {k: v for k, v in r.items() if k != "left_s"} for h, r in d.items()}

        if steady(now) != steady(self.shown):
            self.shown = now
            self.changed()
        check(note=lambda text: print(text, file=sys.stderr, flush=True))

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.look()
            except Exception as e:  # noqa: BLE001 - the dashboard runs on without the countdown
                print(f"gpujob ui: the powered-off hosts' countdown failed: {type(e).__name__}: {e}", file=sys.stderr)
            self.stopped.wait(EVERY_S)
