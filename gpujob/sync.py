"""Upload: code and data to the host, only what changed, one verified stream.

One exec channel after connecting (agent verb ``sync``): the agent writes its manifest (remote
trees with cached content hashes, part files of cut transfers, free space) as one line, the
laptop plans and writes the stream of what differs (nothing when nothing changed), the agent
applies it and answers. A no-op sync is one round trip; a sync with changes adds the stream.
Over the multiplexer's kept connection the same two halves are the verbs ``manifest`` and
``receive`` answered by the kept agent process (a small upload is one request; a large one
streams into a ``receive`` command), so an edit-and-resubmit starts no process on the host.
The laptop walks its trees while the manifest is on its way, and reads, hashes and compresses
the stream in one thread while another sends it (the link and the two CPUs work at once).

A file travels when it is missing there, its size, exec bit or link differs, or its mtime
differs and the content hashes differ too (the laptop's sync record in
``<config>/sync-hashes.json`` and the agent's cache mean only files whose size or mtime changed
are hashed). ``data:`` entries ask the agent to hash everything (cached), so a data set
already there costs one manifest. Large files go in verified 4 MiB chunks; a cut transfer
resumes at the first chunk the part file does not have. Deletions are mirrored in the
project's ``code/`` only; ``data/`` is shared between jobs and never pruned. The stream is
gzip-compressed when a sample of the payload compresses well (``GPUJOB_SYNC_CODEC`` forces
``none``, ``gz:L``, ``xz:L`` or ``bz2:L``).
"""

from __future__ import annotations

import io
import os
import queue
import stat
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from gpujob.agent import Agent
from gpujob.bundle import import_remote
from gpujob.errors import ConnectError, GpujobError, RemoteError
from gpujob.ignore import walk
from gpujob.paths import config_dir
from gpujob.spec import JobSpec

chunks: Any = import_remote("chunks")
FREE_MARGIN = 256 << 20
KEPT_UPLOAD_MAX = 1 << 20  # file bytes one request to the kept agent carries; more stream (pipelined)
DEFAULT_CODEC = "gz:1"


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
    prefix: list[str] = field(default_factory=list)
    st: os.stat_result | None = None

    def item(self) -> Any:
        return chunks.Item(self.arcname, self.path, self.size, self.mtime, self.mode, self.link, self.is_dir, self.prefix,
                           self.st)


@dataclass
class Plan:
    send: list[Entry] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    unchanged: int = 0
    resumed_bytes: int = 0

    @property
    def bytes(self) -> int:
        return sum(e.size - len(e.prefix) * chunks.CHUNK for e in self.send if not e.is_dir and e.link is None)


def sync_record() -> Any:
    """The laptop's hash cache (the sync record)."""
    return chunks.HashCache(config_dir() / "sync-hashes.json", strict=True)


def _entry(arc: str, path: Path, st: os.stat_result) -> Entry:
    if stat.S_ISLNK(st.st_mode):
        return Entry(arc, path, 0, 0, 0o777, link=os.readlink(path))
    if stat.S_ISDIR(st.st_mode):
        return Entry(arc, path, 0, 0, stat.S_IMODE(st.st_mode), is_dir=True)
    return Entry(arc, path, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), st=st)


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
        if chunks.is_tmp_name(rel.rpartition("/")[2]):
            continue
        if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode):
            out[rel] = _entry(f"{prefix}/{rel}", top / rel, st)
    return out


def _same(e: Entry, remote: list | None, record: Any) -> bool:
    if remote is None:
        return False
    size, mtime, mode, link = remote[:4]
    rhash = remote[4] if len(remote) > 4 else None
    if e.link is not None or link is not None:
        return link == e.link
    if size != e.size or (mode & 0o111) != (e.mode & 0o111):
        return False
    if record is None or rhash is None:  # nothing to compare contents with: the quick check
        return mtime == e.mtime
    # the record knows this file's hash only while its size, mtime_ns, ctime and inode stay
    # the same (and were not racily close to the clock); otherwise it is read again
    return record.hash(e.path, e.st) == rhash


def plan_tree(local: dict[str, Entry], remote: dict, mirror: str | None = None, record: Any = None) -> Plan:
    """What to send so ``remote`` matches ``local``; with ``mirror`` (the tree's name), what to delete too."""
    plan = Plan()
    rfiles: dict[str, list] = remote.get("files", {})
    rdirs = set(remote.get("dirs", []))
    parts: dict[str, list] = remote.get("parts", {})
    for rel, e in local.items():
        if e.is_dir:
            if rel not in rdirs:
                plan.send.append(e)
            continue
        if _same(e, rfiles.get(rel), record):
            plan.unchanged += 1
            continue
        if e.link is None and parts.get(rel) and e.size > chunks.CHUNK:
            e.prefix = chunks.matching_prefix(e.path, parts[rel], e.size)[: (e.size - 1) // chunks.CHUNK]
            plan.resumed_bytes += len(e.prefix) * chunks.CHUNK
        plan.send.append(e)
    if mirror is not None:
        plan.delete = [f"{mirror}/{rel}" for rel in list(rfiles) + sorted(rdirs) if rel and rel not in local]
    return plan


def choose_codec(entries: list[Entry], sample: int = 64 << 10, max_files: int = 24) -> str:
    """``gz:1`` when a sample of the payload (the largest files, and small ones together)
    shrinks below 80 % under zlib level 1, else ``none``; ``GPUJOB_SYNC_CODEC`` overrides."""
    forced = os.environ.get("GPUJOB_SYNC_CODEC")
    if forced:
        return forced
    files = [e for e in entries if not e.is_dir and e.link is None and e.size]
    if not files:
        return DEFAULT_CODEC  # headers only: they shrink a lot
    total = sum(e.size for e in files)
    by_size = sorted(files, key=lambda e: -e.size)
    picks = by_size[: max_files // 2] + by_size[max_files // 2:][:: max(1, len(by_size) // max_files)][: max_files // 2]
    raw = comp = 0
    for e in picks:
        try:
            with open(e.path, "rb") as f:
                data = f.read(sample)
        except OSError:
            continue
        weight = e.size / total
        raw += int(len(data) * weight * 1000) + 1
        comp += int(len(zlib.compress(data, 1)) * weight * 1000) + 1
    return DEFAULT_CODEC if comp < 0.8 * raw else "none"


@dataclass
class SyncReport:
    files_sent: int
    bytes_sent: int
    deleted: int
    unchanged: int
    round_trips: int
    resumed_bytes: int = 0
    wire_bytes: int = 0
    codec: str = "none"


def targets(spec: JobSpec, project: str) -> list[str]:
    """The agent arguments naming the trees to compare: code, then each ``data:`` entry (hashed)."""
    args = ["--dir", f"projects/{project}/code"]
    for d in spec.data:
        args += ["--hash-dir", f"data/{d.dst}"]
    return args


def local_trees(spec: JobSpec, project: str) -> list[dict[str, Entry]]:
    """The local code tree, then each ``data:`` entry's."""
    out = [local_tree(Path(spec.workdir), f"projects/{project}/code", spec.exclude)]
    out += [local_tree(Path(d.src), f"data/{d.dst}", use_ignore_files=False) for d in spec.data]
    return out


def plan_from(remote: dict, spec: JobSpec, project: str, record: Any = None,
              trees: list[dict[str, Entry]] | None = None) -> Plan:
    """The plan for the code and every ``data:`` entry against the remote manifest."""
    code_dir = f"projects/{project}/code"
    trees = trees if trees is not None else local_trees(spec, project)
    plan = plan_tree(trees[0], remote[code_dir], mirror=code_dir, record=record)
    for d, local in zip(spec.data, trees[1:]):
        sub = plan_tree(local, remote[f"data/{d.dst}"], record=record)
        plan.send += sub.send
        plan.unchanged += sub.unchanged
        plan.resumed_bytes += sub.resumed_bytes
    return plan


def open_session(agent: Agent, args: list[str]) -> tuple[Any, dict]:
    """Start the agent's ``sync`` verb and read its manifest line (installing the agent if needed)."""
    return agent.stream_doc("sync", args)


class _Pipe:
    """A bounded queue of byte pieces between the thread writing the stream and the one sending it."""

    def __init__(self, piece: int = 256 << 10, depth: int = 32) -> None:
        self.q: queue.Queue = queue.Queue(depth)
        self.buf = bytearray()
        self.piece = piece
        self.stopped = False

    def write(self, data: Any) -> int:
        if not self.buf and len(data) >= self.piece:  # a large file's piece: no copy
            self.put(bytes(data))
            return len(data)
        self.buf += data
        if len(self.buf) >= self.piece:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self.buf:
            self.put(bytes(self.buf))
            self.buf.clear()

    def put(self, item: Any) -> None:
        while True:
            if self.stopped:
                raise OSError("the upload stopped")
            try:
                self.q.put(item, timeout=0.2)
                return
            except queue.Full:
                continue


def _callbacks(plan: Plan, record: Any, progress: Callable[[int, int], None] | None
               ) -> tuple[Callable[[int], None], Callable[[Any, str], None]]:
    """The stream writer's byte counter (drives ``progress``) and hash hook (fills the record)."""
    total, done = plan.bytes, [0]

    def on_bytes(n: int) -> None:
        done[0] += n
        if progress:
            progress(done[0], total)

    def on_hash(item: Any, h: str) -> None:
        if record is not None:
            try:
                record.put(item.path, h, item.st)
            except OSError:
                pass

    return on_bytes, on_hash


def fits_kept_agent(plan: Plan) -> bool:
    """Small enough to go as one request to the kept ``serve`` agent: small files only (no
    resumable large file), at most ``KEPT_UPLOAD_MAX`` bytes in all."""
    return plan.bytes <= KEPT_UPLOAD_MAX and all(e.size < chunks.CHUNK and not e.prefix for e in plan.send)


def upload_kept(agent: Agent, plan: Plan, record: Any = None, progress: Callable[[int, int], None] | None = None,
                codec: str | None = None) -> tuple[int, str]:
    """Send a small ``plan`` as one ``receive`` request to the kept agent; (bytes on the wire, codec)."""
    codec = codec or choose_codec(plan.send)
    on_bytes, on_hash = _callbacks(plan, record, progress)
    buf = io.BytesIO()
    comp = chunks.Compressed(buf, codec)
    try:
        chunks.write_items(comp, (e.item() for e in plan.send), plan.delete, on_bytes, on_hash)
    except chunks.TransferError as e:
        raise GpujobError(str(e), "run submit again once the file stopped changing") from None
    comp.finish()
    try:
        agent.call("receive", input=buf.getvalue(), timeout=600)
    finally:
        if record is not None:
            record.save()
    return comp.wire_bytes, codec


def upload(s: Any, agent: Agent, plan: Plan, record: Any = None, progress: Callable[[int, int], None] | None = None,
           codec: str | None = None) -> tuple[int, str]:
    """Send ``plan`` as one stream into the open session ``s``; returns (bytes on the wire, codec).

    One thread reads, hashes, frames and compresses; this one sends what it hands over."""
    codec = codec or choose_codec(plan.send)
    on_bytes, on_hash = _callbacks(plan, record, progress)
    pipe = _Pipe()
    comp = chunks.Compressed(pipe, codec)
    end = object()

    def produce() -> None:
        try:
            chunks.write_items(comp, (e.item() for e in plan.send), plan.delete, on_bytes, on_hash)
            comp.finish()
            pipe.put(end)
        except BaseException as e:  # noqa: BLE001 - handed to the sending thread
            try:
                pipe.put(e)
            except OSError:  # the sender stopped first: it has its own error
                pass

    producer = threading.Thread(target=produce, name="gpujob-sync-read", daemon=True)
    producer.start()
    broke: BaseException | None = None
    try:
        while True:
            item = pipe.q.get()
            if item is end:
                break
            if isinstance(item, BaseException):
                raise item
            s.stdin.write(item)
            s.stdin.flush()
    except chunks.TransferError as e:
        raise GpujobError(str(e), "run submit again once the file stopped changing") from None
    except (OSError, EOFError) as e:
        broke = e
    finally:
        pipe.stopped = True
        producer.join()
        if record is not None:
            record.save()
    if isinstance(broke, EOFError):
        raise broke
    s.close_stdin()
    out = s.stdout.read()
    rc = s.wait()
    if rc != 0 or broke is not None:
        raise RemoteError(f"upload to {agent.host.name} broke off: {s.stderr_text().strip()[-1000:] or out.decode()[-1000:] or broke}",
                          "run submit again: finished files are skipped and a large file resumes at its last chunk")
    return comp.wire_bytes, codec


def sync_job(agent: Agent, spec: JobSpec, project: str, progress: Callable[[int, int], None] | None = None) -> SyncReport:
    """Bring ``projects/<project>/code`` and every ``data:`` entry up to date on the host.

    Over a kept connection (the multiplexer) the manifest and a small upload are each one
    request to the kept agent, with no command started on the host, and a large upload streams
    into a ``receive`` command; otherwise one exec channel carries the manifest out and the
    stream in."""
    record = sync_record()
    walked: dict[str, Any] = {}

    def walk_local() -> None:  # while the manifest is on its way
        try:
            walked["trees"] = local_trees(spec, project)
        except BaseException as e:  # noqa: BLE001 - raised below, in this thread
            walked["error"] = e

    kept = getattr(agent.t, "serve_call", None) is not None
    walker = threading.Thread(target=walk_local, name="gpujob-sync-walk", daemon=True)
    walker.start()
    s: Any = None
    try:
        if kept:
            remote = agent.call("manifest", targets(spec, project), timeout=600)
        else:
            s, remote = open_session(agent, targets(spec, project))
    finally:
        walker.join()
    if "error" in walked:
        if s is not None:
            s.kill()
        raise walked["error"]
    plan = plan_from(remote, spec, project, record, walked["trees"])
    record.save()
    _check_space(agent, plan, remote, s)
    if not plan.send and not plan.delete:
        if s is not None:
            with s:
                s.close_stdin()
                s.wait(60)
        return SyncReport(0, 0, 0, plan.unchanged, 1)
    if s is None:
        if fits_kept_agent(plan):
            wire, codec = upload_kept(agent, plan, record, progress)
            return _report(plan, 2, wire, codec)
        s = agent.stream("receive")  # a large upload streams over a command of its own
    with s:
        try:
            wire, codec = upload(s, agent, plan, record, progress)
        except (EOFError, OSError) as e:  # the link dropped mid-stream (paramiko raises either)
            raise ConnectError(f"the connection to {agent.host.name} dropped during the upload ({e or type(e).__name__})",
                               "run submit again: finished files are kept and a cut file resumes") from None
    return _report(plan, 2, wire, codec)


def _check_space(agent: Agent, plan: Plan, remote: dict[str, Any], s: Any) -> None:
    """Refuse, before anything is written, an upload larger than the free space there."""
    free = remote.get("free_bytes")
    if free is not None and plan.bytes + FREE_MARGIN > free:
        if s is not None:
            s.close_stdin()
            s.wait(60)
            s.kill()
        raise GpujobError(
            f"not enough space on {agent.host.name}: {plan.bytes / 1e9:.2f} GB to send, {free / 1e9:.2f} GB free under {agent.root}",
            "free space on the instance (gpujob doctor shows each disk) or move the root to the data disk "
            f"(gpujob host set {agent.host.name} --root /root/autodl-tmp/gpujob); nothing was written",
        )


def _report(plan: Plan, round_trips: int, wire: int, codec: str) -> SyncReport:
    nfiles = sum(1 for e in plan.send if not e.is_dir)
    return SyncReport(nfiles, plan.bytes, len(plan.delete), plan.unchanged, round_trips, plan.resumed_bytes, wire, codec)
