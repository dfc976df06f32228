"""``pull``: a job's checkpoints and logs from the host into ``DEST/<job_id>/``.

One exec channel (``send --manifest --list``): the agent writes what the selection holds
(sizes, mtimes, modes) as one line, the laptop answers with only the files that are missing or
differ here (a cut large file asks to
resume from the chunks its part file holds; the agent checks them against its copy). Every
file arrives under a short temporary name (``.gpujob-<hash>.part``) and is renamed into place once its content hash
checks out. Entries that would land outside DEST are refused before anything is written.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, Callable, TypedDict

from gpujob.bundle import import_remote
from gpujob.errors import ConnectError, GpujobError, Interrupted, RemoteError, link_cut
from gpujob.jsontypes import JSON
from gpujob.transport.agent import Agent

wire: Any = import_remote("stream")  # not "stream": extract() takes one
AGAIN = "run pull again: finished files are kept and a large file resumes at its last verified chunk"
# What chunks says when the stream stops short: a cut link (or an empty stream), not a bad tree.
_CUT_SIGNS = ("ended early", "ended before", "or an empty one")


class Extracted(TypedDict):
    """What ``extract`` wrote: files and bytes, links left out (``skipped``), files the job still wrote (``held``)."""

    files: int
    bytes: int
    skipped: list[str]
    held: list[str]


class Pulled(Extracted):
    """``pull``'s answer (docs/json.md: pull)."""

    job_id: str
    dest: str
    selected: JSON  # the manifest's: the checkpoint chosen, or None
    unchanged: int  # files already here
    selected_fetched: bool  # a file of it travelled: a new checkpoint, or a new version under its name
    stray: JSON
    stray_hint: JSON
    note: JSON
    refused: list[str]
    refused_why: dict[str, str]


def extract(stream: Any, dest: Path, on_bytes: Callable[[int], None] | None = None) -> Extracted:
    """Unpack a verified stream under ``dest`` (temporary name, hash check, rename). Links that
    resolve outside ``dest`` are not kept: they are listed under ``skipped``."""
    try:
        res = wire.read_items(dest, stream, links_out=False, on_bytes=on_bytes, modes=0o777,  # no setuid/setgid
                              plain=True)
    except wire.TransferError as e:
        msg = str(e)
        if any(sign in msg for sign in _CUT_SIGNS):  # the link, not the user (exit 3): `pull --follow` waits it out
            raise ConnectError(f"the link was cut during the pull ({msg})", AGAIN) from None
        if msg.startswith("refusing"):  # the host, not the user, is at fault: exit 3 like an unreadable reply
            raise ConnectError(msg, "the remote tree is not trusted; nothing more was written") from None
        raise GpujobError(msg, f"the data arrived damaged; {AGAIN}") from None
    return {"files": res["written"], "bytes": res["bytes"], "skipped": res.get("skipped", []),
            "held": res.get("held", [])}


@contextlib.contextmanager
def dest_locked(dest: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """One pull at a time into ``dest`` (two at once raced on the same part files): the next
    one waits, saying so."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        filelock = import_remote("core.filelock")
    except ImportError:  # not POSIX (no fcntl): no lock
        yield
        return
    fd = os.open(dest, os.O_RDONLY)
    try:
        if not filelock.lock(fd, blocking=False):
            (on_wait or _say)(f"another pull into {dest} is running; waiting for it to finish")
            filelock.lock(fd)
        yield
    finally:
        os.close(fd)


def _say(text: str) -> None:
    """A note on stderr; it quotes names the host sent: no control character (an escape sequence) passes."""
    sys.stderr.write("".join(c for c in text if c.isprintable() or c == "\t") + "\n")
    sys.stderr.flush()


def plan_pull(target: Path, manifest: dict) -> tuple[list[Any], int, int, dict[str, str]]:
    """The ``[rel, prefix_chunks]`` list to ask for, bytes to fetch, files already here, and the
    names refused with why (a control character, a path through a link leading out of ``target``):
    one refused name costs that name only, the rest of the checkpoint is asked for."""
    want: list[Any] = []
    refused: dict[str, str] = {}
    nbytes = same = 0
    guard = wire.Guard(target, False, True)  # the receiver's own checks (extract), made here, per name

    def placed(rel: str) -> bool:
        try:
            guard.place(rel)  # where a link points is judged as it is written (extract)
        except wire.TransferError as e:
            refused[rel] = str(e).partition(": ")[2] or str(e)  # the reason; the name is shown by whoever says it
            return False
        return True

    for d in manifest.get("dirs", []):
        if placed(d) and not (target / d).is_dir():
            want.append(d)
    for rel, (size, mtime, _mode, link) in sorted(manifest.get("files", {}).items()):
        if not placed(rel):
            continue
        local = target.joinpath(*PurePosixPath(rel).parts)
        if link is not None:
            if local.is_symlink() and os.readlink(local) == link:
                same += 1
            else:
                want.append(rel)
            continue
        try:
            st = local.lstat()
            if not local.is_symlink() and local.is_file() and st.st_size == size and st.st_mtime_ns == mtime:
                same += 1
                continue
        except OSError:
            pass
        prefix = wire.part_chunks(local) if size > wire.CHUNK else []
        prefix = prefix[: (size - 1) // wire.CHUNK] if prefix else []
        want.append([rel, prefix] if prefix else rel)
        nbytes += size - len(prefix) * wire.CHUNK
    return want, nbytes, same, refused


EXTRA = 64 << 20  # bytes a pull takes beyond twice what the manifest announced (growing logs)
WRITE_WAIT = 30.0  # seconds a pull waits for a file the job is still writing, by default


def pull(agent: Agent, job: str, dest: Path, what: str = "all", metric: str | None = None,
         include: list[str] | None = None, progress: Callable[[int, int], None] | None = None,
         write_wait: float = WRITE_WAIT, note: Callable[[str], None] | None = None) -> Pulled:
    """Copy the job's logs and checkpoints (``what``: all, latest, best) into ``dest/<job_id>/``.

    A file a process holds open for writing is waited for up to ``write_wait`` seconds (``note``
    says so), then left out: the result lists it under ``held``, never as pulled."""
    args = ["--job", job, "--manifest", "--select", what, "--write-wait", str(max(0.0, write_wait))]
    if metric:
        args += ["--metric", metric]
    for g in include or []:
        args += ["--include", g]
    args.append("--list")
    with dest_locked(dest):
        try:
            return _pull(agent, args, dest, progress, note or _say, write_wait)
        except KeyboardInterrupt:
            raise Interrupted(f"pull interrupted: the files that arrived whole are in {dest}, the job is untouched",
                              AGAIN) from None


def tell_pulled(agent: Agent, job_id: str) -> None:
    """The agent learns the files are here: a job waiting with autostop.pull_before_shutdown powers off now."""
    agent.call("pulled", ["--job", job_id])


def _disk_full(target: Path, need: int) -> GpujobError:
    free = shutil.disk_usage(target).free
    return GpujobError(f"no room on the disk holding {target}: {free:,} bytes free, the pull needs {need:,} more",
                       f"free {max(need - free, 0):,} bytes there or pull into a folder on another disk "
                       f"(gpujob pull JOB DEST); finished files are kept and the next pull resumes")


def _pull(agent: Agent, args: list[str], dest: Path, progress: Callable[[int, int], None] | None,
          note: Callable[[str], None], write_wait: float) -> Pulled:
    s, doc = agent.stream_doc("send", args)
    with s:
        job_id = doc["job_id"]
        target = dest / job_id
        target.mkdir(parents=True, exist_ok=True)
        try:
            want, total, same, refused = plan_pull(target, doc)
            if total > shutil.disk_usage(target).free:  # named now, not after a minute of filling it
                raise _disk_full(target, total)
        except GpujobError:
            s.close_stdin()
            raise
        asked = {w if isinstance(w, str) else w[0] for w in want}
        for rel, pids in sorted((doc.get("writing") or {}).items()):
            if rel in asked:
                note(f"{rel} is open for writing (pid {', '.join(map(str, pids))}): waiting up to "
                     f"{write_wait:g}s for the job to finish writing it")
        done = [0]
        most = 2 * total + EXTRA  # the logs may grow between the manifest and the send; nothing else does

        def on_bytes(n: int) -> None:
            done[0] += n
            if done[0] > most:  # a hostile host would fill the disk: what it announced bounds what is taken
                raise wire.TransferError(f"refusing more than {most:,} bytes: the host announced {total:,}")
            if progress:
                progress(done[0], total)

        s.stdin.write(json.dumps(want).encode() + b"\n")
        s.close_stdin()
        try:
            res = extract(s.stdout, target, on_bytes)
        except (OSError, EOFError) as e:
            if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):  # at once, not after 60 s
                raise _disk_full(target, max(total - done[0], 1)) from None
            if isinstance(e, OSError) and e.errno == errno.ENAMETOOLONG:  # "run pull again" would fail again
                name = str(e.filename or "")
                raise ConnectError(f"a name in the job's tree on {agent.host.name} is too long for this system "
                                   f"({len(name.encode())} bytes: …{name[-60:]!r})",
                                   "pull into a folder with a shorter path, or leave it out (--include GLOB, "
                                   "--latest); the files before it are kept") from None
            rc = s.wait(60)
            if rc < 0:
                raise link_cut(agent.host, "pull", rc, AGAIN) from None
            raise RemoteError(f"pull from {agent.host.name} broke off: {e} {s.stderr_text()[-500:]}", AGAIN) from None
        rc = s.wait()
    if rc < 0:
        raise link_cut(agent.host, "pull", rc, AGAIN)
    if rc != 0:
        raise RemoteError(f"pull failed on {agent.host.name}: {s.stderr_text()[-500:]}", "run pull again")
    sel = doc.get("selected")
    return {"job_id": job_id, "dest": str(target), "selected": sel, "unchanged": same,
            # a file of the selected checkpoint travelled: a new one, or a new version under its name
            "selected_fetched": isinstance(sel, str) and bool(sel) and any(a == sel or a.startswith(sel + "/") for a in asked),
            "stray": doc.get("stray") or [], "stray_hint": doc.get("stray_hint"), "note": doc.get("note"),
            "refused": sorted(refused), "refused_why": refused, **res}
