"""Ctrl-C held back while a change that must not be cut in half is made (``host rekey``).

Inside ``deferred()`` a SIGINT only sets ``pending``; the code checks it at the points where the
state is whole and stops there, saying what state it reached. Outside the main thread (a
notebook's worker) signals cannot be caught: nothing is deferred there."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Deferred:
    """Whether a Ctrl-C came while deferred."""

    pending = False


@contextmanager
def deferred() -> Iterator[Deferred]:
    state = Deferred()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def held(signum: int, frame: Any) -> None:
        state.pending = True

    before = signal.signal(signal.SIGINT, held)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, before)
