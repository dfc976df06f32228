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

The cost follows what changed, not the tree's size: the laptop keeps a record of what it left
on the host (``gpujob/usecases/sync/tree.py``) and sends the digest of that tree with its request; the
agent computes its tree's digest from its hash cache (keyed by size, mtime_ns and inode) and,
when they are equal, answers ``same`` instead of a manifest. A file travels when it is missing
there, its size, exec bit or link differs, or its content hash differs; a local file is read
to tell only when its size, mtime_ns, inode or ctime moved since it was recorded. A file
changed while it is read is read again (small) or refused with a clear message (large), never
sent torn. Large files go in verified 4 MiB chunks; a cut transfer
resumes at the first chunk the part file does not have. A file of 64 MiB or more goes first,
over several channels at once where the round trip calls for it (``gpujob/usecases/sync/ranges.py``). Deletions are mirrored in the
project's ``code/`` only; its ``data/`` (the staging of ``data:``, which each job sees through its own
view: remote/data/datastore.py) is never pruned. The stream is
gzip-compressed when a sample of the payload compresses well (``GPUJOB_SYNC_CODEC`` forces
``none``, ``gz:L``, ``xz:L`` or ``bz2:L``).
"""

from __future__ import annotations

import io
import json
import os
import queue
import sys
import threading
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, TypedDict

from gpujob.bundle import import_remote
from gpujob.config.spec import JobSpec
from gpujob.errors import ConnectError, GpujobError, RemoteError, link_cut
from gpujob.transport import replies
from gpujob.transport.agent import Agent
from gpujob.usecases.secrets import check_home, check_size, declared_values, withhold
from gpujob.usecases.sync.ranges import Preopened, ranged, upload_ranged
from gpujob.usecases.sync.tree import LocalTree, Record, StaleRecord, TreePlan, plan_tree, scan, sent

stream: Any = import_remote("stream")
FREE_MARGIN = 256 << 20
KEPT_UPLOAD_MAX = 1 << 20  # file bytes one request to the kept agent carries; more stream (pipelined)
DEFAULT_CODEC = "gz:1"
LEASE_WAIT: float = import_remote("core.protocol").LEASE_WAIT  # s a submit waits for another submit of its project


@dataclass
class Plan:
    """Every tree's plan together: one stream carries them all."""

    trees: list[TreePlan] = field(default_factory=list)
    send: list[Any] = field(default_factory=list)  # stream.Item, every tree's
    delete: list[str] = field(default_factory=list)
    unchanged: int = 0
    resumed_bytes: int = 0

    @property
    def bytes(self) -> int:
        return sum(e.size - len(e.prefix) * stream.CHUNK for e in self.send if not e.is_dir and e.link is None)


def choose_codec(entries: list[Any], sample: int = 64 << 10, max_files: int = 24) -> str:
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


class LeftOut(TypedDict):
    """A ``data:`` source inside the workdir, left out of the code: sent once, as data."""

    path: str  # relative to the workdir
    bytes: int | None  # None: not known without a walk


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
    large: list[str] = field(default_factory=list)  # code files over LARGE_CODE sent: data: is their place
    as_data: list[LeftOut] = field(default_factory=list)  # data: sources inside the workdir: not code


LARGE_CODE = 50_000_000  # bytes: a code file this big is named with a warning (belongs in data: or exclude:)


def tree_names(spec: JobSpec, project: str) -> list[str]:
    """The remote trees a job needs: its project's code, then each ``data:`` entry, staged in the
    project's own folder (under its sync lease: another project's ``dst`` of the same name never
    lands there); the job itself reads a view of content-addressed copies (remote/data/datastore.py)."""
    return [f"projects/{project}/code"] + [f"projects/{project}/data/{d.dst}" for d in spec.data]


def targets(spec: JobSpec, project: str, records: list[Record] | None = None) -> list[str]:
    """The agent arguments naming the trees to compare (with the digest each record expects)."""
    names = tree_names(spec, project)
    args = ["--dir", names[0]]
    for n in names[1:]:
        args += ["--hash-dir", n]
    for n, r in zip(names, records or []):
        if r.digest:
            args += ["--known", f"{n}={r.digest}"]
    for n, d in zip(names[1:], spec.data):  # a data: entry never sent from here: maybe another project did
        if records and not records[names.index(n)].digest:
            found = import_remote("data.datashape").shape(d.src)
            if found:
                args += ["--shape", f"{n}={found}"]
    return args


def local_trees(spec: JobSpec, project: str, records: list[Record] | None = None) -> list[LocalTree]:
    """The local code tree, then each ``data:`` entry's (``lazy`` or a ``delta`` where a record helps)."""
    names = tree_names(spec, project)
    recs: list[Record | None] = list(records) if records else [None] * len(names)
    out = [scan(Path(spec.workdir), names[0], spec.exclude, record=recs[0])]
    out += [scan(Path(d.src), n, use_ignore_files=False, record=r) for d, n, r in zip(spec.data, names[1:], recs[1:])]
    return out


def host_key(agent: Agent) -> str:
    """Which record to use: the profile's name and root (a record naming another machine's tree
    costs only speed: the agent's digest will not match it)."""
    return json.dumps([agent.host.name, agent.root])


def plan_from(remote: dict, trees: list[LocalTree], records: list[Record]) -> Plan:
    """The plan for the code (mirrored) and every ``data:`` entry against the agent's answer."""
    plan = Plan()
    for i, (t, rec) in enumerate(zip(trees, records)):
        tp = plan_tree(t, remote[t.prefix], rec, mirror=i == 0)
        plan.trees.append(tp)
        plan.send += tp.send
        plan.delete += tp.delete
        plan.unchanged += tp.unchanged
        plan.resumed_bytes += tp.resumed_bytes
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


def _callbacks(plan: Plan, progress: Callable[[int, int], None] | None
               ) -> tuple[Callable[[int], None], Callable[[Any, str], None]]:
    """The stream writer's byte counter (drives ``progress``) and hash hook (fills the records
    the upload leaves once it succeeds)."""
    total, done = plan.bytes, [0]
    lock = threading.Lock()  # the ranged files and the rest count from two threads
    owner = {}
    for tp in plan.trees:
        n = len(tp.local.prefix) + 1
        for it in tp.send:
            owner[it.arcname] = (tp, it.arcname[n:])
    now = time.time_ns()

    def on_bytes(n: int) -> None:
        with lock:
            done[0] += n
            if progress:
                progress(done[0], total)

    def on_hash(item: Any, h: str) -> None:
        tp, rel = owner.get(item.arcname, (None, ""))
        if tp is not None:
            with lock:
                sent(tp, rel, item, h, now)

    return on_bytes, on_hash


def fits_kept_agent(plan: Plan) -> bool:
    """Small enough to go as one request to the kept ``serve`` agent: small files only (no
    resumable large file), at most ``KEPT_UPLOAD_MAX`` bytes in all."""
    return plan.bytes <= KEPT_UPLOAD_MAX and all(e.size < stream.CHUNK and not e.prefix for e in plan.send)


def upload_kept(agent: Agent, plan: Plan, progress: Callable[[int, int], None] | None = None,
                codec: str | None = None, args: list[str] | None = None,
                counters: tuple[Callable[[int], None], Callable[[Any, str], None]] | None = None,
                keep: Callable[[Any, bytes], bool] | None = None) -> tuple[int, str]:
    """Send a small ``plan`` as one ``receive`` request to the kept agent; (bytes on the wire, codec)."""
    codec = codec or choose_codec(plan.send)
    on_bytes, on_hash = counters or _callbacks(plan, progress)
    buf = io.BytesIO()
    comp = stream.Compressed(buf, codec)
    try:
        stream.write_items(comp, plan.send, plan.delete, on_bytes, on_hash, keep=keep)
    except stream.TransferError as e:
        raise GpujobError(str(e), "run submit again once the file stopped changing") from None
    comp.finish()
    agent.call("receive", args, input=buf.getvalue(), timeout=600)
    return comp.wire_bytes, codec


def upload(s: Any, agent: Agent, plan: Plan, progress: Callable[[int, int], None] | None = None,
           codec: str | None = None, counters: tuple[Callable[[int], None], Callable[[Any, str], None]] | None = None,
           keep: Callable[[Any, bytes], bool] | None = None) -> tuple[int, str]:
    """Send ``plan`` as one stream into the open session ``s``; returns (bytes on the wire, codec).

    One thread reads, hashes, frames and compresses; this one sends what it hands over. ``keep``:
    the secrets check on each small file's bytes (usecases/secrets ``InStream``)."""
    codec = codec or choose_codec(plan.send)
    on_bytes, on_hash = counters or _callbacks(plan, progress)
    pipe = _Pipe()
    comp = stream.Compressed(pipe, codec)
    end = object()

    def produce() -> None:
        try:
            stream.write_items(comp, plan.send, plan.delete, on_bytes, on_hash, keep=keep)
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
    except stream.TransferError as e:
        raise GpujobError(str(e), "run submit again once the file stopped changing") from None
    except (OSError, EOFError) as e:
        broke = e
    finally:
        pipe.stopped = True
        producer.join()
    if isinstance(broke, EOFError):
        raise broke
    s.close_stdin()
    out = s.stdout.read()
    rc = s.wait()
    again = "run submit again: finished files are skipped and a large file resumes at its last chunk"
    if rc < 0 or (rc == 0 and broke is not None):  # no exit status: the link, not the receiver, failed
        raise link_cut(agent.host, "upload", rc, again)
    if rc != 0:
        full = _disk_full(out)
        if full is not None:  # submitting again cannot help until space is freed
            raise RemoteError(full.get("error", ""), full.get("remedy", ""))
        raise RemoteError(f"upload to {agent.host.name} failed (exit {rc}): "
                          f"{s.stderr_text().strip()[-1000:] or out.decode('utf-8', 'replace')[-1000:] or broke}", again)
    return comp.wire_bytes, codec


class _Walked(TypedDict, total=False):
    """What ``sync_job``'s walk of the local trees found, while the manifest was on its way."""

    trees: list[LocalTree]
    pre: Preopened  # the large files' channels
    secrets: dict[str, str]
    error: BaseException


class _Rest(TypedDict, total=False):
    """The rest's upload in its thread: (bytes on the wire, codec), or what it raised."""

    rest: tuple[int, str]
    error: BaseException


def _disk_full(out: bytes) -> dict[str, Any] | None:
    """The receiver's answer when the disk there filled up (``code: disk_full``), else None."""
    try:
        doc = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return doc if isinstance(doc, dict) and doc.get("code") == "disk_full" else None


def _manifest_leased(agent: Agent, args: list[str]) -> dict:
    """The kept agent's manifest, waiting (here, not in the shared kept process) while another
    submit of the project holds its sync lease."""
    deadline = time.monotonic() + LEASE_WAIT
    delay = 0.05
    while True:
        remote = agent.call("manifest", args, timeout=600)
        if "busy" not in remote:
            return remote
        if time.monotonic() > deadline:
            raise RemoteError(f"another submit of this project is still syncing to {agent.host.name}",
                              "wait for it to finish, then submit again; nothing was sent")
        if delay == 0.05:
            sys.stderr.write(f"another submit of this project is syncing to {agent.host.name}: waiting for it "
                             f"(at most {remote['busy']:.0f} s)\n")
        time.sleep(delay)
        delay = min(0.5, delay * 1.5)


def sync_job(agent: Agent, spec: JobSpec, project: str, progress: Callable[[int, int], None] | None = None,
             lease: str | None = None, force: bool = False, on_stream: Callable[[], None] | None = None) -> SyncReport:
    """Bring ``projects/<project>/code`` and every ``data:`` entry up to date on the host.

    Over a kept connection (the multiplexer) the manifest and a small upload are each one
    request to the kept agent, with no command started on the host, and a large upload streams
    into a ``receive`` command; otherwise one exec channel carries the manifest out and the
    stream in. With ``lease`` (a token of the submit's), the project's code is leased to this
    submit from the manifest until its job's snapshot (remote/core/locks.py). ``force``: send a
    home-folder or huge workdir (never its secrets: usecases/secrets). ``on_stream`` is called as a
    stream with no ranged file begins (usecases/launch/early.py: one more channel, never beside
    the range channels)."""
    check_home(spec, force)
    key = host_key(agent)
    records = [Record.for_tree(key, n) for n in tree_names(spec, project)]
    leased = ["--project", project, "--lease", lease] if lease else []
    walked: _Walked = {}

    def walk_local() -> None:  # while the manifest is on its way
        try:
            walked["trees"] = local_trees(spec, project, records)
            walked["pre"] = Preopened(agent, walked["trees"], records, leased)  # large files' channels
            walked["secrets"] = declared_values(spec)  # its modules' import too is off the critical path
        except BaseException as e:  # noqa: BLE001 - raised below, in this thread
            walked["error"] = e

    kept = agent.t.keeps_agent
    walker = threading.Thread(target=walk_local, name="gpujob-sync-walk", daemon=True)
    walker.start()
    s: Any = None
    try:
        if kept:
            remote = _manifest_leased(agent, targets(spec, project, records) + leased)
        else:
            s, remote = open_session(agent, targets(spec, project, records) + leased)
    except BaseException:
        walker.join()
        if "pre" in walked:
            walked["pre"].close()
        raise
    walker.join()
    if "error" in walked:
        if s is not None:
            s.kill()
        raise walked["error"]
    try:
        try:
            check_size(walked["trees"][0], spec, force)
        except GpujobError:
            if s is not None:
                s.kill()
            raise
        return _sync_planned(agent, spec, project, remote, walked["trees"], records, s, leased, progress, walked["pre"],
                             walked["secrets"], on_stream)
    except GpujobError as e:
        # refused here (no room there, a file changing as it is read): the next submit of the project
        # need not wait for this one's lease to expire. A broken link or a failed receive is left
        # alone: the agent's receive gives the lease back itself, and a dead link would only add a
        # connect timeout before the error
        if lease and not isinstance(e, (ConnectError, RemoteError)):
            try:
                agent.call("unlease", leased, timeout=30)
            except Exception:  # noqa: BLE001 - the link may be what failed; the lease then expires
                pass
        raise
    finally:
        walked["pre"].close()


def _sync_planned(agent: Agent, spec: JobSpec, project: str, remote: dict, trees: list[Any], records: list[Record],
                  s: Any, leased: list[str], progress: Callable[[int, int], None] | None,
                  pre: Preopened | None = None, secrets: dict[str, str] | None = None,
                  on_stream: Callable[[], None] | None = None) -> SyncReport:
    try:
        replies.check_manifest(agent.endpoint.name, remote, [t.prefix for t in trees])
        plan = plan_from(remote, trees, records)
    except StaleRecord:  # rare (a damaged record): the host's manifest decides instead
        if s is not None:
            s.kill()
            s = None
        remote = _manifest_leased(agent, targets(spec, project) + leased)
        replies.check_manifest(agent.endpoint.name, remote, [t.prefix for t in trees])
        plan = plan_from(remote, trees, [Record.blank(r.path) for r in records])  # rebuilt from it
    # keys and credentials, whatever the ignore files say (a large plan's contents: checked as the stream reads them)
    check = withhold(plan, declared_values(spec) if secrets is None else secrets)
    _check_space(agent, plan, remote, s)
    if not plan.send and not plan.delete:
        if s is not None:
            with s:
                s.close_stdin()
                s.wait(60)
        _save_records(plan, remote)
        return SyncReport(0, 0, 0, plan.unchanged, 1, as_data=left_out(spec, plan))
    whole = plan
    counters = _callbacks(whole, progress)  # one count of the bytes for both parts
    big = ranged(agent, plan.send)
    ids = {id(e) for e in big}
    rest = Plan(plan.trees, [e for e in plan.send if id(e) not in ids], plan.delete, plan.unchanged, plan.resumed_bytes)
    skipped = extra = 0
    if big:  # the large files over several channels (gpujob/usecases/sync/ranges.py), the rest beside them
        wire, codec, skipped = _upload_both(agent, rest, s, leased, counters, big, pre, check)
        extra = sum(e.size for e in big) - skipped  # their bytes on the wire
    else:
        if on_stream is not None:
            on_stream()
        wire, codec = _upload_rest(agent, rest, s, leased, counters, check)
    if check is not None:
        check.done(whole)
    _save_records(whole, remote)
    return replace(_report(whole, 2, wire + extra, codec, skipped), as_data=left_out(spec, whole))


def _upload_both(agent: Agent, rest: Plan, s: Any, leased: list[str],
                 counters: tuple[Callable[[int], None], Callable[[Any, str], None]], big: list[Any],
                 pre: Preopened | None, keep: Callable[[Any, bytes], bool] | None = None) -> tuple[int, str, int]:
    """The ranged files in this thread while the rest goes on the sync's own command in another:
    the ranges' data starts as soon as their channels are open, not a round trip (the rest's
    answer) later; (the rest's bytes on the wire, its codec, the ranged bytes not sent)."""
    done: _Rest = {}

    def send_rest() -> None:
        try:
            done["rest"] = _upload_rest(agent, rest, s, leased, counters, keep)
        except BaseException as e:  # noqa: BLE001 - raised below, in the caller's thread
            done["error"] = e

    t = threading.Thread(target=send_rest, name="gpujob-sync-rest", daemon=True)
    t.start()
    try:
        skipped = upload_ranged(agent, big, leased, *counters, pre)
    finally:
        t.join()
    if "error" in done:
        raise done["error"]
    return (*done["rest"], skipped)


def _upload_rest(agent: Agent, plan: Plan, s: Any, leased: list[str],
                 counters: tuple[Callable[[int], None], Callable[[Any, str], None]],
                 keep: Callable[[Any, bytes], bool] | None = None) -> tuple[int, str]:
    """Send ``plan`` (no ranged file in it) on the sync's own command ``s``, as a request to the
    kept agent, or on a ``receive`` command of its own; (bytes on the wire, codec)."""
    if s is None:
        if fits_kept_agent(plan):
            return upload_kept(agent, plan, args=leased, counters=counters, keep=keep)
        s = agent.stream("receive", leased)  # a large upload streams over a command of its own
    with s:
        try:
            return upload(s, agent, plan, counters=counters, keep=keep)
        except (EOFError, OSError) as e:  # the link dropped mid-stream (paramiko raises either)
            raise ConnectError(f"the connection to {agent.host.name} dropped during the upload ({e or type(e).__name__})",
                               "run submit again: finished files are kept and a cut file resumes") from None


def _save_records(plan: Plan, remote: Mapping[str, object]) -> None:
    """After a successful sync each record is what the host now holds (a no-op keeps a record
    that still matches, unless files had to be read to tell)."""
    for tp in plan.trees:
        if tp.after is tp.record:  # the record still holds
            continue
        tp.after.digest = tp.after.compute_digest()
        tp.after.save()


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


def left_out(spec: JobSpec, plan: Plan) -> list[LeftOut]:
    """The ``data:`` sources inside the workdir (config/spec.py ``data_in_code``), each with its size."""
    trees = {d.dst: tp for d, tp in zip(spec.data, plan.trees[1:])}
    return [{"path": rel, "bytes": _tree_bytes(trees[dst]) if dst in trees else None}
            for rel, dst in spec.data_in_code.items()]


def _tree_bytes(tp: TreePlan) -> int | None:
    """A data tree's bytes: the walk's, else the record's (the tree is as it left it)."""
    local = tp.local
    if not local.lazy and local.delta is None:
        return sum(v[0] for v in local.files.values())
    try:
        return sum(v[0] for v in tp.after.files.values())
    except (StaleRecord, OSError):
        return None


def _report(plan: Plan, round_trips: int, wire: int, codec: str, skipped: int = 0) -> SyncReport:
    """``skipped``: bytes of ranged files the host held already (counted as resumed, not sent)."""
    nfiles = sum(1 for e in plan.send if not e.is_dir)
    code = plan.trees[0] if plan.trees else None
    large = [e.arcname[len(code.local.prefix) + 1:] for e in code.send if not e.is_dir and e.link is None
             and e.size > LARGE_CODE] if code else []
    return SyncReport(nfiles, plan.bytes - skipped, len(plan.delete), plan.unchanged, round_trips,
                      plan.resumed_bytes + skipped, wire, codec, large)
