"""Run gpujob's CLI with one real SIGINT delivered to its own process at a chosen point of its code.

    python -m tests.faults.sigint_at EVENT MODULE:FUNCTION[@MODULE:WITHIN] MARKER -- gpujob args...

EVENT is ``call`` (entering FUNCTION) or ``return`` (leaving it), the first time (``EVENT#N``: the
Nth time); with ``@WITHIN`` only while a call of WITHIN is under way (e.g. the SSH channel's request sent, inside one step of a command).
MARKER is created when the signal is sent, so a test knows the point was reached. The signal is
the kernel's (``kill``), handled as a Ctrl-C at a terminal would be; nothing of gpujob is replaced."""

from __future__ import annotations

import os
import runpy
import signal
import sys
from types import FrameType
from typing import Any


def _split(spec: str) -> tuple[str, str]:
    mod, _, fn = spec.rpartition(":")
    return mod, fn


def main() -> None:
    event, where, marker = sys.argv[1:4]
    event, _, nth = event.partition("#")
    left = [int(nth or 1)]
    assert sys.argv[4] == "--"
    target, _, within = where.partition("@")
    mod, fn = _split(target)
    wmod, wfn = _split(within) if within else ("", "")
    depth = [0]

    def hook(frame: FrameType, ev: str, arg: Any) -> None:
        code = frame.f_code
        if wfn and code.co_name == wfn and frame.f_globals.get("__name__") == wmod and ev in ("call", "return"):
            depth[0] += 1 if ev == "call" else -1
        if ev == event and code.co_name == fn and frame.f_globals.get("__name__") == mod and (not wfn or depth[0] > 0):
            left[0] -= 1
            if left[0]:
                return
            sys.setprofile(None)
            with open(marker, "w"):
                pass
            os.kill(os.getpid(), signal.SIGINT)

    signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, whatever the test runner left
    sys.argv = ["gpujob"] + sys.argv[5:]
    sys.setprofile(hook)
    runpy.run_module("gpujob.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
