"""The transfer bar of submit, pull and move (bytes, rate, ETA), on stderr when it is a terminal."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any


class TransferBar:
    """Called with (done, total) bytes; drawn from the first call on, so that notes printed before
    the transfer starts (placement, a stop on the old host) are not mixed with it."""

    def __init__(self, description: str) -> None:
        self.description = description
        self.bar: Any = None
        self.task: Any = None

    def describe(self, text: str) -> None:
        """A new label (the host is known only once placement chose it)."""
        self.description = text
        if self.bar is not None:
            self.bar.update(self.task, description=text)

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self.bar = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                                TransferSpeedColumn(), TimeRemainingColumn(), transient=True)
            self.task = self.bar.add_task(self.description, total=None)
            self.bar.start()
        self.bar.update(self.task, completed=done, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@contextlib.contextmanager
def transfer_bar(description: str, enabled: bool) -> Iterator[TransferBar | None]:
    """A progress bar on a terminal (``enabled`` and stderr a tty): yields its update callback, or None."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    bar = TransferBar(description)
    try:
        yield bar
    finally:
        bar.close()
