"""The verbs that look at a job as it runs: ``logs`` (its output from an offset, a number of lines
or a moment, followed), ``watch`` (the status document), ``tb`` (its TensorBoard), ``port`` and
``agentlog`` (the agent's own log)."""

import argparse
import sys
import time
from pathlib import Path
from typing import Mapping

from remote.core import procs
from remote.core.layout import Root
from remote.jobs.store import judged, resolve


def _offset_of_last_lines(path: Path, n: int) -> int:
    try:
        with open(str(path), "rb") as f:
            f.seek(0, 2)
            size = pos = f.tell()
            count = 0
            while pos > 0:
                step = min(65536, pos)
                pos -= step
                f.seek(pos)
                block = f.read(step)
                end = len(block) - 1 if pos + step == size and block.endswith(b"\n") else len(block)
                for i in range(end - 1, -1, -1):
                    if block[i:i + 1] == b"\n":
                        count += 1
                        if count == n:
                            return pos + i + 1
            return 0
    except OSError:
        return 0


def logs(root: Root, a: argparse.Namespace) -> None:
    """A header line ``gpujob-log JOB OFFSET``, then output.log's bytes from OFFSET.

    With ``--lines N`` the offset is that of the last N lines; with ``--follow`` the
    stream goes on until the job has ended and the file is drained.
    """
    job_id = resolve(root, a.job)
    job = root.job(job_id)
    out = sys.stdout.buffer
    offset = a.offset if a.lines is None else _offset_of_last_lines(job.log, a.lines)
    if a.since is not None:
        from remote.jobs.logindex import offset_since

        offset = offset_since(job, a.since if a.since > 0 else time.time() + a.since)
    out.write("gpujob-log {} {}\n".format(job_id, offset).encode())
    out.flush()
    idle_since = time.time()
    while True:
        try:
            with open(str(job.log), "rb") as f:
                f.seek(offset)
                chunk = f.read(1 << 20)
        except OSError:
            chunk = b""
        if chunk:
            out.write(chunk)
            out.flush()
            offset += len(chunk)
            idle_since = time.time()
            continue
        if not a.follow:
            return
        if not judged(root, job, procs.boot_id())[1].lives and time.time() - idle_since > 0.5:
            return
        time.sleep(0.25)


def watch(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    from remote.view import watch as view

    return view.watch(root, a.job, a.points)


def tb(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    from remote.view import tensorboard

    if a.stop:
        return tensorboard.stop_tensorboard(root, a.job)
    if getattr(a, "install", False):
        return tensorboard.install_tensorboard(root, a.job)
    return tensorboard.tensorboard(root, a.job, a.port, a.wait)


def port(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    """Whether something listens on 127.0.0.1:PORT here, and AutoDL's URL for it if exposed."""
    from remote.view import tensorboard

    return {"port": a.port, "listening": tensorboard.listening(a.port), "autodl_url": tensorboard.autodl_url(a.port)}


def agentlog(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    """The last N lines of ``<root>/agent.log`` (the agent's own errors)."""
    from remote.core.layout import tail_lines

    return {"path": str(root.agent_log), "lines": tail_lines(root.agent_log, a.lines, 1 << 20)}
