"""Upload: code and data to the host, only what changed, one tar stream.

Round trips: one ``manifest`` (remote trees + free space), one ``receive`` (skipped when
nothing changed). Deletions are mirrored in the project's ``code/`` only; ``data/`` is
shared between jobs and never pruned.
"""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gpujob.agent import Agent
from gpujob.errors import GpujobError, RemoteError
from gpujob.ignore import walk
from gpujob.spec import JobSpec

CONTROL = ".gpujob-sync.json"
FREE_MARGIN = 256 << 20


@dataclass
class Entry:
    """A local file, folder or link to send, under its name relative to the remote root."""

    arcname: str
    path: Path
    size: int
    mtime: int
    mode: int
    link: str | None = None
    is_dir: bool = False


@dataclass
class Plan:
    send: list[Entry] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    unchanged: int = 0

    @property
    def bytes(self) -> int:
        return sum(e.size for e in self.send)


def _entry(arc: str, path: Path, st: os.stat_result) -> Entry:
    if stat.S_ISLNK(st.st_mode):
        return Entry(arc, path, 0, 0, 0o777, link=os.readlink(path))
    if stat.S_ISDIR(st.st_mode):
        return Entry(arc, path, 0, 0, stat.S_IMODE(st.st_mode), is_dir=True)
    return Entry(arc, path, st.st_size, int(st.st_mtime), stat.S_IMODE(st.st_mode))


def local_tree(top: Path, prefix: str, exclude: list[str] | None = None, use_ignore_files: bool = True) -> dict[str, Entry]:
    """Entries of a local file or folder, named ``prefix/rel``."""
    out: dict[str, Entry] = {}
    if top.is_file():
        out[""] = _entry(prefix, top, top.stat())
        return out
    if use_ignore_files:
        items = walk(top, exclude)
    else:
        items = ((str(p.relative_to(top)), p.lstat(), p.is_dir() and not p.is_symlink()) for p in sorted(top.rglob("*")))
    for rel, st, _ in items:
        if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode):
            out[rel] = _entry(f"{prefix}/{rel}", top / rel, st)
    return out


def _differs(e: Entry, remote: list | None) -> bool:
    if remote is None:
        return True
    size, mtime, mode, link = remote
    if e.link is not None:
        return link != e.link
    return link is not None or size != e.size or mtime != e.mtime or (mode & 0o111) != (e.mode & 0o111)


def plan_tree(local: dict[str, Entry], remote: dict, mirror: str | None = None) -> Plan:
    """What to send so ``remote`` matches ``local``; with ``mirror`` (the tree's name), what to delete too."""
    plan = Plan()
    rfiles: dict[str, list] = remote.get("files", {})
    rdirs = set(remote.get("dirs", []))
    for rel, e in local.items():
        if e.is_dir:
            if rel not in rdirs:
                plan.send.append(e)
            continue
        if _differs(e, rfiles.get(rel)):
            plan.send.append(e)
        else:
            plan.unchanged += 1
    if mirror is not None:
        plan.delete = [f"{mirror}/{rel}" for rel in list(rfiles) + sorted(rdirs) if rel and rel not in local]
    return plan


def write_tar(out: io.RawIOBase, plan: Plan, on_bytes: Callable[[int], None] | None = None) -> None:
    """Stream the plan as a tar: the deletions first, then every entry."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        if plan.delete:
            data = json.dumps({"delete": plan.delete}).encode()
            info = tarfile.TarInfo(CONTROL)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for e in plan.send:
            info = tarfile.TarInfo(e.arcname)
            info.mode = e.mode
            info.mtime = e.mtime
            if e.link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, e.link
                tar.addfile(info)
            elif e.is_dir:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = e.size
                with open(e.path, "rb") as f:
                    tar.addfile(info, _Counting(f, on_bytes) if on_bytes else f)


class _Counting(io.RawIOBase):
    def __init__(self, f: io.BufferedReader, cb: Callable[[int], None]) -> None:
        self.f, self.cb = f, cb

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.cb(len(data))
        return data


@dataclass
class SyncReport:
    files_sent: int
    bytes_sent: int
    deleted: int
    unchanged: int
    round_trips: int


def sync_job(agent: Agent, spec: JobSpec, project: str, progress: Callable[[int, int], None] | None = None) -> SyncReport:
    """Bring ``projects/<project>/code`` and every ``data:`` entry up to date on the host."""
    code_dir = f"projects/{project}/code"
    targets = [code_dir] + [f"data/{d.dst}" for d in spec.data]
    remote = agent.call("manifest", [a for t in targets for a in ("--dir", t)])
    code_local = local_tree(Path(spec.workdir), code_dir, spec.exclude)
    plan = plan_tree(code_local, remote[code_dir], mirror=code_dir)
    for d in spec.data:
        src = Path(d.src)
        local = local_tree(src, f"data/{d.dst}", use_ignore_files=False)
        sub = plan_tree(local, remote[f"data/{d.dst}"])
        plan.send += sub.send
        plan.unchanged += sub.unchanged
    free = remote.get("free_bytes")
    if free is not None and plan.bytes + FREE_MARGIN > free:
        raise GpujobError(
            f"not enough space on {agent.host.name}: {plan.bytes / 1e9:.2f} GB to send, {free / 1e9:.2f} GB free under {agent.root}",
            "free space on the instance (gpujob doctor shows each disk) or move the root to the data disk "
            f"(gpujob host set {agent.host.name} --root /root/autodl-tmp/gpujob); nothing was written",
        )
    if not plan.send and not plan.delete:
        return SyncReport(0, 0, 0, plan.unchanged, 1)
    total = plan.bytes
    done = [0]

    def on_bytes(n: int) -> None:
        done[0] += n
        if progress:
            progress(done[0], total)

    with agent.stream("receive", ["--dir", "."]) as s:
        try:
            write_tar(s.stdin, plan, on_bytes)
            s.stdin.flush()
        except OSError:
            pass
        s.close_stdin()
        out = s.stdout.read()
        rc = s.wait()
        if rc != 0:
            raise RemoteError(f"upload to {agent.host.name} failed: {s.stderr_text().strip()[-1000:] or out.decode()[-1000:]}",
                              "run submit again: files already received are skipped")
    return SyncReport(len(plan.send), plan.bytes, len(plan.delete), plan.unchanged, 2)
