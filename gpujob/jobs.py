"""Client use cases over a job that exists: status, ls, stop, resume, tail, pull."""

from __future__ import annotations

import time
from typing import Any, Callable

from gpujob.agent import Agent
from gpujob.errors import ConnectError
from gpujob.transport import Result

FINAL = ("succeeded", "failed", "stopped", "autostopped", "lost")


def status(agent: Agent, job: str) -> dict[str, Any]:
    """One job in detail (one remote command)."""
    return agent.call("status", ["--job", job])["jobs"][0]


def ls(agent: Agent, limit: int = 0) -> list[dict[str, Any]]:
    """Every job on the host, oldest first (one remote command)."""
    return agent.call("status", ["--limit", str(limit)] if limit else [])["jobs"]


def stop(agent: Agent, job: str, wait: float = 600) -> dict[str, Any]:
    """Stop a job (checkpoint first when its code polls the stop file) and wait for the end."""
    return agent.call("stop", ["--job", job, "--wait", str(wait)], timeout=wait + 60)


def resume(agent: Agent, job: str) -> dict[str, Any]:
    """Restart a lost, stopped or failed job from its newest complete checkpoint."""
    return agent.call("resume", ["--job", job])


def follow_logs(
    reconnect: Callable[[], Agent], job: str, write: Callable[[bytes], None], offset: int = 0, lines: int | None = None,
    follow: bool = True, retries: int = 30,
) -> int:
    """Copy the job's log; after a dropped link, reconnect and go on from the byte reached.

    ``lines`` starts at the last N lines instead of ``offset``. Returns the final offset.
    Nothing is lost or repeated: the offset counts the bytes written.
    """
    failures = 0
    while True:
        try:
            agent = reconnect()
            args = ["--job", job] + (["--lines", str(lines)] if lines is not None else ["--offset", str(offset)])
            with agent.stream("logs", args + (["--follow"] if follow else [])) as s:
                s.close_stdin()
                first = s.stdout.readline()
                header = first.decode("utf-8", "replace").split()
                if len(header) != 3 or header[0] != "gpujob-log":
                    rest = first + s.stdout.read()
                    agent._parse("logs", Result(s.wait(), rest, s.stderr_text().encode()))  # raises the agent's error
                    raise ConnectError(f"unexpected answer from the agent: {rest[:200]!r}", "")
                job, offset, lines = header[1], int(header[2]), None
                while True:
                    chunk = s.stdout.read1(65536) if hasattr(s.stdout, "read1") else s.stdout.read(65536)
                    if not chunk:
                        break
                    write(chunk)
                    offset += len(chunk)
                    failures = 0
                rc = s.wait()
            if rc == 0:
                return offset
            raise ConnectError(f"log stream ended with exit {rc}: {s.stderr_text().strip()[-300:]}", "")
        except (ConnectError, OSError, EOFError) as e:
            failures += 1
            if failures > retries:
                raise ConnectError(f"lost the connection while following the log ({e})", f"gpujob tail {job} -f resumes") from None
            time.sleep(min(30, 0.5 * 2 ** min(failures, 6)))
