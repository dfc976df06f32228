"""Helper commands gpujob runs on this machine (power commands, git): one rule for all of them.

Each runs in a session of its own under a time limit the caller takes from its own budget (a quick
command such as ``status`` gives a power ``state`` a few seconds, ``host state`` minutes). A command
given up on (the limit passed, or Ctrl-C) is ended with its whole process group: SIGTERM, a short
grace, SIGKILL; the command is reaped, and a process of the group that still exists is named
(``survivors``). Processes a finished command leaves in the background do not hold its answer back:
once it exited, its output is read for a moment more and then taken as it is.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import threading
import time
from dataclasses import dataclass

from gpujob.bundle import import_remote
from gpujob.errors import GpujobError

GRACE_S = 1.0  # SIGTERM → SIGKILL for a command given up on
PIPE_GRACE_S = 0.5  # after the command exited: how long background children may keep its output open


@dataclass
class Finished:
    rc: int
    out: str
    err: str
    seconds: float


class Interrupted(KeyboardInterrupt):
    """Ctrl-C while a helper command ran: it and its group were ended; ``out``/``err``: what it had printed
    (a provider's create may have said the id of an instance it made)."""

    def __init__(self, out: str = "", err: str = "") -> None:
        super().__init__()
        self.out, self.err = out, err


class TimedOut(GpujobError):
    """A helper command did not finish within its limit; it and its process group were ended."""

    def __init__(self, what: str, limit: float, out: str = "", err: str = "", survivors: list[int] | None = None,
                 remedy: str = "") -> None:
        left = f"; still there after SIGKILL: pid {', '.join(map(str, survivors))}" if survivors else ""
        super().__init__(f"{what} did not finish in {limit:.3g} s and was ended with its processes{left}",
                         remedy or "run it by hand to see where it hangs")
        self.what, self.limit, self.out, self.err = what, limit, out, err
        self.survivors: list[int] = survivors or []


def _group_members(pgid: int) -> list[int] | None:
    """The live (not zombie) pids of the process group ``pgid``, from /proc; None where there is none."""
    found: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] != b"Z":
            found.append(int(name))
    return found


def end_group(proc: subprocess.Popen, grace: float = GRACE_S) -> list[int]:
    """End ``proc`` (a session leader) and every process of its group: SIGTERM, ``grace``, SIGKILL;
    ``proc`` reaped. The pids of the group still there after that (stuck in the kernel). The loop is
    the agent's (remote/core/procs.py), one for both sides."""
    procs = import_remote("core.procs")
    pgid = proc.pid
    procs.end(lambda sig: procs.signal_group(pgid, sig), lambda: not _gone(proc, pgid), grace, 5.0, tick=0.02)
    try:
        proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        pass
    left = _group_members(pgid)
    if left is None:  # no /proc: the group as the kernel answers for it
        return [pgid] if procs.group_alive(pgid) else []
    return left


def _gone(proc: subprocess.Popen, pgid: int) -> bool:
    """Whether the group ``pgid`` is gone (its leader reaped on the way: a zombie still counts)."""
    proc.poll()
    if not import_remote("core.procs").group_alive(pgid):
        return True
    # its leader reaped and only zombies left (a PID 1 that reaps no orphans, in a container)
    return proc.returncode is not None and _group_members(pgid) == []


def run(argv: list[str], timeout: float, what: str, *, env: dict[str, str] | None = None, cwd: str | None = None,
        input: bytes | None = None, remedy: str = "") -> Finished:
    """Run ``argv`` (its own session, stdin ``input`` or nothing) for at most ``timeout`` seconds.

    ``what`` names the command in the error (``power.state of a100``); ``remedy`` is its next step.
    ``TimedOut`` past the limit; a KeyboardInterrupt ends the command's group too, then goes on up as
    ``Interrupted`` with what the command had printed."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd, start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None
    if input is not None:
        threading.Thread(target=_feed, args=(proc, input), daemon=True).start()
    out, err = bytearray(), bytearray()
    bufs = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    exited_at: float | None = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at >= PIPE_GRACE_S:
                break  # its background children hold the pipes: what it said is all there is
            left = t0 + timeout - now
            if exited_at is None and left <= 0:
                raise subprocess.TimeoutExpired(argv, timeout)
            for key, _ in sel.select(min(0.2, left) if exited_at is None else PIPE_GRACE_S):
                try:
                    data = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if data:
                    bufs[key.fd] += data
                else:
                    sel.unregister(key.fd)
        rc = proc.wait(timeout=max(0.0, t0 + timeout - time.monotonic()))  # it closed its output but runs on
    except subprocess.TimeoutExpired:
        raise TimedOut(what, timeout, _text(out), _text(err), end_group(proc), remedy) from None
    except KeyboardInterrupt:  # Ctrl-C: nothing of it goes on behind our back; what it said goes up with it
        end_group(proc)
        raise Interrupted(_text(out), _text(err)) from None
    except BaseException:
        end_group(proc)
        raise
    finally:
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
    return Finished(rc, _text(out), _text(err), time.monotonic() - t0)


def _text(b: bytes | bytearray) -> str:
    return bytes(b).decode("utf-8", "replace")


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass
