"""Client use cases over a job that exists: status, ls, stop, resume, tail (``follow_logs``); pull is in sync/pull.py."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from typing import Callable, cast

from gpujob.backoff import backoff
from gpujob.bundle import import_remote
from gpujob.config.hosts import LOCAL
from gpujob.errors import ConnectError, GpujobError, HostKeyChanged
from gpujob.jsontypes import JSONObject
from gpujob.transport import Result, replies
from gpujob.transport.agent import Agent
from gpujob.transport.jobview import JobView

FINAL: tuple[str, ...] = import_remote("core.protocol").TERMINAL
STOP_WAIT: float = import_remote("core.spec").STOP_WAIT  # s a stop waits for the job's processes to be gone
HEADER_MAX = 4096  # the log stream's first line (``gpujob-log JOB OFFSET``)


def status(agent: Agent, job: str) -> JSONObject:
    """One job in detail (one remote command)."""
    return agent.call("status", ["--job", job])["jobs"][0]


def ls(agent: Agent, limit: int = 0, everything: bool = False, older: list[int] | None = None) -> list[JSONObject]:
    """The host's running and queued jobs and its newest finished ones (``everything``: every
    job), oldest first, in one remote command; ``older`` gets the count of jobs left out."""
    args = ["--limit", str(limit)] if limit else ["--all"] if everything else []
    doc = agent.call("status", args)
    if older is not None:
        older.append(int(doc.get("older") or 0))
    return with_instance(doc)


def with_instance(doc: JSONObject) -> list[JSONObject]:
    """A listing's jobs, each marked with the instance the agent says it runs in (its root's id)."""
    inst = doc.get("instance")
    jobs = cast("list[JSONObject]", doc["jobs"])  # a list of documents: the reply's check (replies.py) saw to it
    if isinstance(inst, str) and re.fullmatch(r"[0-9a-f]{32}", inst):  # what remote/core/layout.py makes, nothing else
        for j in jobs:
            if isinstance(j, dict):
                j["instance"] = inst
    return jobs


def once_each(jobs: list[JSONObject], seen: set[tuple[str, str]]) -> list[JSONObject]:
    """``jobs`` less those already in ``seen`` (which gets the rest): two host profiles that reach one
    instance (the same root's id) list its jobs once, under the first profile listed."""
    out = []
    for j in jobs:
        v = JobView(j)
        key = (str(v.instance or f"host:{v.host}"), str(v.job_id))
        if key not in seen:
            seen.add(key)
            out.append(j)
    return out


def stop(agent: Agent, job: str, wait: float = STOP_WAIT, after_checkpoint: float | bool | None = None,
         job_mode: bool = False, reason: str | None = None) -> JSONObject:
    """Stop a job (checkpoint first when its code polls the stop file) and wait for the end;
    ``after_checkpoint``: the next complete checkpoint first (at most that many s; True: twice the
    job's usual interval between checkpoints, else 20 min); ``job_mode``:
    as the job file's ``stop: {mode}`` says (``move``); ``reason``: the job's reason instead of "stopped by
    user" (the account's budget). The answer names the job's processes that still run (``survivors``)."""
    extra = [] if after_checkpoint is None or after_checkpoint is False else \
        ["--after-checkpoint", "auto" if after_checkpoint is True else str(after_checkpoint)]
    return agent.call("stop", ["--job", job, "--wait", str(wait), *extra, *(["--job-mode"] if job_mode else []),
                               *(["--reason", reason] if reason else [])],
                      timeout=wait + 60)


def resume(agent: Agent, job: str) -> JSONObject:
    """Restart a lost, stopped or failed job from its newest complete checkpoint."""
    return agent.call("resume", ["--job", job])


def link_probe() -> float:
    """Seconds of silence before a link is probed (env GPUJOB_LINK_PROBE, default 10)."""
    return float(os.environ.get("GPUJOB_LINK_PROBE", "10"))


def alive(agent: Agent, timeout: float | None = None) -> bool:
    """Whether the transport still carries a command (a probe: ``true``) within ``timeout``.

    The probe runs in a thread: on a frozen link even opening a channel never returns.
    """
    limit = timeout or max(5.0, link_probe())
    ok: list[bool] = []

    def probe() -> None:
        try:
            ok.append(agent.t.run("true", timeout=limit).rc == 0)
        except (GpujobError, OSError, TimeoutError, EOFError):
            ok.append(False)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(limit)
    return bool(ok and ok[0])


def follow_logs(
    reconnect: Callable[[], Agent], job: str, write: Callable[[bytes], None], offset: int = 0, lines: int | None = None,
    follow: bool = True, retries: int = 30, since: float | None = None, idle_probe: float | None = None,
    on_start: Callable[[str, int], None] | None = None, on_link: Callable[[str], None] | None = None,
) -> int:
    """Copy the job's log; after a dropped link, reconnect and go on from the byte reached.

    ``lines`` starts at the last N lines, ``since`` (epoch seconds) at the first line written
    then or later, else ``offset``. Returns the final offset. Nothing is lost or repeated:
    the offset counts the bytes handed to ``write``. While following, a link silent for
    ``idle_probe`` seconds is probed with a command; a dead one is closed and reopened
    (a laptop that slept finds its TCP connection gone without a word). ``on_link`` hears, once per
    outage, that the link was lost and is being reopened, and when the log flows again.
    """
    failures = 0
    previous: Agent | None = None
    where, down_since = "the host", 0.0  # down_since: when the outage said to on_link began (0: none)
    idle_probe = idle_probe or link_probe()
    while True:
        done = threading.Event()
        try:
            if previous is not None:
                previous.close()
            agent = previous = reconnect()
            where = agent.host.name
            if since is not None:
                start = ["--since", repr(since)]
            else:
                start = ["--lines", str(lines)] if lines is not None else ["--offset", str(offset)]
            last = [time.monotonic()]
            if agent.host.kind != LOCAL:  # watches the opening too (and a plain tail): a link can freeze at any time
                threading.Thread(target=_watchdog, args=(agent, last, done, idle_probe), daemon=True).start()
            with agent.stream("logs", ["--job", job, *start] + (["--follow"] if follow else [])) as s:
                s.close_stdin()
                buf = b""
                while b"\n" not in buf and len(buf) <= HEADER_MAX:  # a header is one short line
                    got = s.read_some()
                    if not got:
                        break
                    buf += got
                first, _, chunk = buf.partition(b"\n")
                header = first.decode("utf-8", "replace").split()
                if len(header) != 3 or header[0] != "gpujob-log" or not header[2].isdigit():
                    rest = buf
                    while True:  # the agent's error document, read up to a reply's limit
                        got = s.read_some()
                        if not got:
                            break
                        rest += got
                        if len(rest) > replies.limit("logs"):
                            s.kill()
                            raise replies.too_large(agent.endpoint.name, replies.limit("logs"))
                    rc = s.wait()
                    if rc < 0:  # no exit status: the link went down, not the agent
                        raise ConnectError("the log stream closed before its header", "")
                    agent._parse("logs", Result(rc, rest, s.stderr_text().encode()))  # raises the agent's error
                    # not a cut link: asking again gets the same answer (it was retried 30 times, for minutes)
                    raise replies.unreadable(agent.endpoint.name, f"a log stream without its header ({rest[:200]!r})")
                job, offset, lines, since = header[1], int(header[2]), None, None
                if on_start is not None:
                    on_start(job, offset)
                    on_start = None
                if down_since and on_link is not None:
                    on_link(f"reconnected to {where} after {time.monotonic() - down_since:.0f} s; "
                            f"the log goes on from where it stopped")
                down_since = 0.0
                while True:
                    if not chunk:
                        chunk = s.read_some()
                        if not chunk:
                            break
                    last[0] = time.monotonic()
                    write(chunk)
                    offset += len(chunk)
                    failures = 0
                    chunk = b""
                rc = s.wait()
            if rc == 0:
                return offset
            raise ConnectError("the link closed under the log stream" if rc < 0 else  # no exit status: the link went
                               f"log stream ended with exit {rc}: {s.stderr_text().strip()[-300:]}", "")
        except (HostKeyChanged, replies.UnreadableReply):  # asking again gets the same answer
            raise
        except (ConnectError, OSError, EOFError) as e:
            failures += 1
            if os.environ.get("GPUJOB_DEBUG"):
                sys.stderr.write(f"follow_logs: {type(e).__name__}: {e} (failure {failures})\n")
            if failures > retries:
                raise ConnectError(f"lost the connection while following the log ({e})", f"gpujob tail {job} -f resumes") from None
            if follow and not down_since and on_link is not None:  # once per outage, not per try
                down_since = time.monotonic()
                why = e.cause if isinstance(e, GpujobError) else str(e) or type(e).__name__
                on_link(f"lost the link to {where} ({why}); reconnecting (up to {retries} tries, Ctrl-C ends the tail, "
                        "the job goes on)")
            time.sleep(backoff(failures, 1.0, 30.0))
        finally:
            done.set()


def _watchdog(agent: Agent, last: list[float], done: threading.Event, idle: float) -> None:
    """Close the transport when the link has been silent for ``idle`` s and a probe fails."""
    while not done.wait(min(2.0, idle)):
        if time.monotonic() - last[0] < idle:
            continue
        if done.is_set():
            return
        if not alive(agent):
            if not done.is_set():
                agent.t.reset()
            return
        last[0] = time.monotonic()


class LineFilter:
    """Passes whole lines that match ``pattern`` (bytes regex) on to ``write``; keeps partial lines."""

    def __init__(self, write: Callable[[bytes], None], pattern: str | None = None, as_json: bool = False) -> None:
        self.write, self.as_json, self.job, self.offset = write, as_json, "", 0
        self.rx = re.compile(pattern.encode("utf-8", "surrogateescape")) if pattern else None
        self.partial = b""

    LINE_MAX = 1 << 20  # a longer line (a host's flood with no newline) goes on in pieces, never held whole

    def __call__(self, chunk: bytes) -> None:
        data = self.partial + chunk
        *whole, self.partial = data.split(b"\n")
        for line in whole:
            self._line(line + b"\n")
        while len(self.partial) > self.LINE_MAX:
            piece, self.partial = self.partial[:self.LINE_MAX], self.partial[self.LINE_MAX:]
            self._line(piece + b"\n")

    def _line(self, line: bytes) -> None:
        start = self.offset
        self.offset += len(line)
        if self.rx is not None and not self.rx.search(line):
            return
        if self.as_json:
            doc = {"job_id": self.job, "offset": start, "line": line.rstrip(b"\n").decode("utf-8", "replace")}
            self.write((json.dumps(doc) + "\n").encode())
        else:
            self.write(line)

    def start(self, job: str, offset: int) -> None:
        """The stream's first header: the job id and the byte offset the copy begins at."""
        self.job, self.offset = job, offset

    def flush(self) -> None:
        """The last line, when the log does not end with a newline."""
        if self.partial:
            line, self.partial = self.partial, b""
            self._line(line)
