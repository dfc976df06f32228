"""``gpujob move JOB --to HOST``: the job goes on on another host, same id, same history.

The newest complete checkpoint comes from, in order: the old host (when it answers; the job
is stopped there first, and marked ``moved`` after), the newest mirrored complete checkpoint
(``checkpoint.mirror``, read through rclone into the laptop's cache), the laptop's newest pull, or
shared storage (``checkpoint.dir`` that both hosts see: nothing to copy). The code and data
are synced from the laptop as ``submit`` does (from the job file recorded at submit), the
environment is provisioned by the new host's supervisor, and the job's log, metrics and
events continue in the new host's job folder.

The files go through the laptop without landing on its disk: the old host's verified
``send`` stream is piped into ``adopt`` on the new host (see remote/jobs/move.py), which checks
every file's hash and, after a cut, asks only for what is missing. Host to host directly
would need one host to hold credentials for the other; rented instances rarely reach each
other, so the laptop (which reaches both) carries the stream.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from gpujob.bundle import import_remote
from gpujob.config import index, remembered
from gpujob.errors import GpujobError, Interrupted, JobNotFound, RemoteError
from gpujob.jsontypes import JSONObject
from gpujob.transport import Result
from gpujob.transport.agent import Agent, connect_agent
from gpujob.transport.jobview import JobView
from gpujob.usecases.jobs.ops import FINAL, STOP_WAIT

Note = Callable[[str], None]


@dataclass
class Source:
    """Where the job's files come from: ``host`` (the old host), ``pull`` (a pulled copy here)
    or ``shared`` (only the checkpoint, on storage the new host sees)."""

    kind: str
    where: str
    manifest: dict[str, Any] = field(default_factory=dict)
    previous: JSONObject = field(default_factory=dict)  # the job's status.json where it was
    agent: Agent | None = None
    stream: Any = None
    path: Path | None = None

    @property
    def checkpoint(self) -> str | None:
        return self.manifest.get("selected")

    def send(self, want: list[Any], out: Any, on_bytes: Callable[[int], None]) -> None:
        """Write the verified stream of ``want`` to ``out``."""
        if self.path is not None:
            import_remote("data.transfer").send_list(self.path, want, _Counting(out, on_bytes))
            return
        if self.stream is None:  # shared storage: an empty stream (the end record only)
            import_remote("stream").write_items(out, [])
            return
        s = self.stream
        s.stdin.write(json.dumps(want).encode() + b"\n")
        s.close_stdin()
        while True:
            chunk = s.read_some()
            if not chunk:
                break
            out.write(chunk)
            on_bytes(len(chunk))
        rc = s.wait()
        if rc != 0:
            raise RemoteError(f"the send stream from {self.where} ended with exit {rc}: {s.stderr_text()[-300:]}",
                              "run gpujob move again: what arrived is kept and the rest is asked for")


class _Counting:
    """A writer that counts what passes (progress of a local source)."""

    def __init__(self, out: Any, on_bytes: Callable[[int], None]) -> None:
        self.out, self.on_bytes = out, on_bytes

    def write(self, data: bytes) -> int:
        self.out.write(data)
        self.on_bytes(len(data))
        return len(data)

    def flush(self) -> None:
        self.out.flush()


def _open_host_source(agent: Agent, job_id: str) -> Source:
    """The old host's manifest (newest complete checkpoint and logs) on an open send channel."""
    base = ["--job", job_id, "--manifest", "--list", "--select"]
    try:
        s, doc = agent.stream_doc("send", [*base, "latest"])
    except RemoteError:  # no complete checkpoint: the logs alone, the job starts from scratch
        logs = [a for name in ("output.log", "metrics.jsonl", "events.jsonl") for a in ("--include", "/" + name)]
        s, doc = agent.stream_doc("send", [*base, "all", *logs])
    return Source("host", agent.host.name if agent.host else "?", doc, agent=agent, stream=s)


def _pulled_source(job_id: str) -> Source | None:
    """The newest pulled copy of the job on this machine, if any."""
    transfer = import_remote("data.transfer")
    for dest in index.pulls_of(job_id):
        path = Path(dest) / job_id
        if not path.is_dir():
            continue
        doc = transfer.select(path, "latest")
        if "error" in doc:
            doc = transfer.select(path, "all")
        try:
            prev = json.loads((path / "status.json").read_text())
        except (OSError, ValueError):
            prev = {}
        return Source("pull", str(path), doc, previous=prev, path=path)
    return None


def _mirror_source(job_id: str, cfg: dict[str, Any], note: Note) -> Source | None:
    """The newest mirrored complete checkpoint (checkpoint.mirror), fetched into the laptop's cache."""
    from gpujob.config.paths import cache_dir
    from gpujob.usecases.sync import mirror

    if not cfg.get("targets"):
        return None
    cache = cache_dir() / "mirror"
    try:
        got = mirror.fetch(job_id, cache, cfg=cfg, record=False)
    except GpujobError as e:  # nothing mirrored yet, or the store cannot be read: the pulls come next
        note(f"no checkpoint from the mirror: {e}")
        return None
    path = cache / job_id
    doc = import_remote("data.transfer").select(path, "latest")
    return Source("mirror", got["target"], doc, path=path)


def find_source(job_id: str, old: Agent | None, checkpoint_dir: str | None, why_old: str,
                note: Note = lambda s: None, mirror: dict[str, Any] | None = None) -> Source:
    """The old host, else the mirror (checkpoint.mirror), else the newest pull here, else shared
    storage; else a clear error."""
    if old is not None:
        return _open_host_source(old, job_id)
    src = _mirror_source(job_id, mirror or {}, note) or _pulled_source(job_id)
    if src is not None:
        return src
    if checkpoint_dir and checkpoint_dir.startswith(("/", "~")):  # a relative one lived on the old host only
        return Source("shared", checkpoint_dir)
    if GONE in why_old:  # the host answered: the job was removed there, and nothing of it is kept anywhere else
        raise GpujobError(
            f"job {job_id} was removed from {why_old.split(' ')[0]} (or the instance was re-imaged), and no checkpoint "
            "of it is anywhere else (no checkpoint.mirror, no pulled copy on this machine, no shared checkpoint.dir): "
            "there is nothing to go on from; nothing was changed",
            f"gpujob ls --all lists the jobs there; submit its job file again to start over (gpujob runs shows "
            f"{job_id}'s arguments)")
    raise GpujobError(
        f"cannot move {job_id}: its host {why_old}, no pulled copy of it is on this machine and its "
        "checkpoints are not on shared storage (checkpoint.dir); nothing was changed",
        f"when the host answers again run gpujob move {job_id} --to HOST (or gpujob pull {job_id} first)")


def _reach_old(host_name: str, job_id: str, stop_wait: float, note: Note) -> tuple[Agent | None, str, dict]:
    """(agent, '', job status) when the old host answers, else (None, why, {}). A job still
    running there is stopped first (its code may write a checkpoint on the stop request)."""
    from gpujob.config.hosts import HostStore
    from gpujob.usecases.jobs import ops as jobs

    try:
        agent = connect_agent(HostStore().get(host_name))
        st = jobs.status(agent, job_id)
    except JobNotFound:  # removed there (rm) or the instance re-imaged: its checkpoints may be elsewhere
        return None, f"{host_name} {GONE} (removed, or the instance was re-imaged)", {}
    except RemoteError as e:
        return None, f"{host_name} answers but its agent failed ({str(e).splitlines()[0]})", {}
    except GpujobError as e:
        return None, f"{host_name} does not answer ({str(e).splitlines()[0]})", {}
    view = JobView(st)
    if view.state == "moved":
        raise GpujobError(f"{job_id} already moved from {host_name} to {view.moved_to}",
                          f"gpujob status {job_id} shows it there")
    if view.state == "succeeded":
        raise GpujobError(f"{job_id} succeeded on {host_name}: there is nothing to continue",
                          f"gpujob pull {job_id} fetches its results; submit again to train anew")
    if view.state not in FINAL:
        note(f"stopping {job_id} on {host_name} (it may checkpoint first)")
        st = jobs.stop(agent, job_id, wait=stop_wait, job_mode=True)  # stop: {mode: checkpoint} waits for one
    return agent, "", st


GONE = "answers but no longer has it"  # the old host holds nothing of the job: nothing to mark moved there


def _still_there(host_name: str, job_id: str) -> bool:
    """Whether ``host_name`` still has the job (a move onto its own host is a re-creation from its
    checkpoints elsewhere: for a job removed there, or an instance re-imaged under the same profile)."""
    from gpujob.config.hosts import HostStore
    from gpujob.usecases.jobs import ops as jobs

    try:
        jobs.status(connect_agent(HostStore().get(host_name)), job_id)
    except JobNotFound:
        return False
    except GpujobError:  # unknown: the move's own connection says what is wrong
        return True
    return True


def move(ref: str, to: str, *, job_file: str | None = None, stop_wait: float = STOP_WAIT,
         progress: Callable[[int, int], None] | None = None, note: Note = lambda s: None) -> dict[str, Any]:
    """Move job ``ref`` to host ``to``; returns what happened (docs/json.md: move)."""
    from gpujob.config.hosts import HostStore
    from gpujob.config.spec import load_spec
    from gpujob.usecases.launch.submit import submit

    entry = remembered.entry_of(ref)  # the job index, else the run ledger (a job rm removed)
    if entry is None:
        raise GpujobError(f"no job {ref!r} was submitted from this machine (neither the job index nor the run "
                          "ledger has it)", "list them with: gpujob runs")
    job_id, old_name = entry["job_id"], entry["host"]
    if "," in old_name:
        raise GpujobError(f"{job_id} runs over several nodes ({old_name}): it cannot move as one job",
                          "stop it and submit it again with nodes: listing the hosts you have now")
    if old_name == to and _still_there(to, job_id):
        raise GpujobError(f"{job_id} is already on {to}", f"gpujob resume {job_id} restarts it there")
    path = job_file or entry.get("job_file")
    if not path or not Path(path).is_file():
        raise GpujobError(f"the job file of {job_id} ({path or 'not recorded'}) is not here: the code, data and "
                          "settings are sent from it", f"gpujob move {job_id} --to {to} --job-file PATH/job.yaml")
    spec = load_spec(path, entry.get("set") or [])
    if "," in to:  # a list: the first (other than the old host) with the job's GPUs free now
        from gpujob.usecases.launch.placement import place

        new_host, new, _ = place([h for h in to.split(",") if h and h != old_name], spec.gpus, note=note)
        to = new_host.name
    else:
        from gpujob.usecases.power.wake import ensure_on

        new_host = ensure_on(HostStore().get(to), note=note)  # a powered-off target is switched on first
        new = connect_agent(new_host)  # before touching the old host: a wrong target changes nothing
    from gpujob.usecases.hosts.preflight import before_submit

    warnings = before_submit(new, new_host, note)  # a new or just powered-on target, as at submit
    try:
        old, why_old, prev = _reach_old(old_name, job_id, stop_wait, note)
    except KeyboardInterrupt:
        raise Interrupted(f"move interrupted while {job_id} was being stopped on {old_name}: nothing was sent to {to}",
                          f"gpujob status {job_id} shows its state; gpujob move {job_id} --to {to} tries again") from None
    src = find_source(job_id, old, spec.checkpoint_dir, why_old, note, spec.checkpoint_mirror)
    src.previous = prev or src.previous
    note(f"moving {job_id}: {old_name} → {to}, checkpoint from {src.kind} ({src.where})")
    moved: dict[str, Any] = {}

    def adopt(request: dict[str, Any]) -> dict[str, Any]:
        request.update(moved_from=old_name, previous=src.previous, offered=src.manifest, source=src.kind)
        moved.update(_adopt(new, request, src, progress))
        return moved

    try:
        res = submit(new, spec, new_host, progress, job_id=job_id, call=adopt)
    except KeyboardInterrupt:
        was = f"is stopped on {old_name} (its checkpoints there untouched)" if old is not None else \
            f"was not reached on {old_name}"
        raise Interrupted(f"move interrupted: {job_id} {was} and may not have started on {to}", f"gpujob move {job_id} --to {to} again resumes (what "
                          f"arrived is kept); or gpujob resume {job_id} --host {old_name} restarts it where it was") from None
    finally:
        if src.stream is not None:
            src.stream.kill()
    fields = {"job_file": str(Path(path).resolve()), "set": entry.get("set") or [], "moved_from": old_name}
    gone = GONE in why_old  # nothing of it is left there to stop or mark (guard must not try: it may be `to`)
    index.record(job_id, to, spec.name, **fields, old_marked=gone)  # the job runs there now, come what may
    marked = False
    if old is not None:
        try:
            old.call("moved", ["--job", job_id, "--to", to])
            marked = True
        except GpujobError as e:  # gpujob guard JOB tells it later
            note(f"could not mark {job_id} moved on {old_name}: {e}")
    if marked:
        index.record(job_id, to, spec.name, **fields, old_marked=True)
    return {"job_id": job_id, "from": old_name, "to": to, "source": src.kind, "source_where": src.where,
            "checkpoint": src.checkpoint, "state": res.get("state"), "files": res.get("received_files", 0),
            "bytes": res.get("received_bytes", 0), "old_marked": marked, "old_unreachable": why_old or None,
            "sync": res.get("sync"), **({"host_warnings": warnings} if warnings else {})}


def _adopt(agent: Agent, request: dict[str, Any], src: Source, progress: Callable[[int, int], None] | None) -> dict:
    """One ``adopt`` channel: request line out, wish list in, the source's stream piped out."""
    done = [0]
    total = sum(v[0] for v in src.manifest.get("files", {}).values())

    def on_bytes(n: int) -> None:
        done[0] += n
        if progress:
            progress(done[0], total)

    with agent.stream("adopt") as s:
        s.stdin.write(json.dumps(request).encode() + b"\n")
        s.stdin.flush()
        line = s.stdout.readline()
        try:
            want = json.loads(line)["want"]
        except (ValueError, KeyError, TypeError):
            s.close_stdin()
            rest = s.stdout.read()
            agent._parse("adopt", Result(s.wait(), line + rest, s.stderr_text().encode()))  # raises the agent's error
            raise RemoteError(f"unexpected answer from {agent.host.name if agent.host else 'the host'}: {line[:200]!r}",
                              "") from None
        try:
            src.send(want, s.stdin, on_bytes)
        except (OSError, EOFError) as e:
            raise RemoteError(f"the move broke off: {e}",
                              "run gpujob move again: what arrived is kept and the rest is asked for") from None
        s.stdin.flush()
        s.close_stdin()
        rest = s.stdout.read()
        return agent._parse("adopt", Result(s.wait(), rest, s.stderr_text().encode()))


def settle_old(job_id: str, note: Note = lambda s: None) -> bool:
    """After a move whose old host did not answer: once it answers, stop the job there if it
    runs (a host that was only cut off kept training) and mark it moved. True once done."""
    from gpujob.config.hosts import HostStore
    from gpujob.usecases.jobs import ops as jobs

    e = index.entry_of(job_id)
    if not e or e.get("old_marked", True) or not e.get("moved_from"):
        return False
    try:
        agent = connect_agent(HostStore().get(e["moved_from"]))
        if JobView(jobs.status(agent, e["job_id"])).state not in FINAL:
            note(f"{e['job_id']} still runs on {e['moved_from']}, which it left: stopping it there")
            jobs.stop(agent, e["job_id"], wait=120)
        agent.call("moved", ["--job", e["job_id"], "--to", e["host"]])
    except GpujobError:
        return False
    index.record(e["job_id"], e["host"], e.get("name", ""), **{k: e[k] for k in ("job_file", "set") if k in e},
                 moved_from=e["moved_from"], old_marked=True)
    note(f"{e['job_id']}: marked moved on {e['moved_from']}")
    return True
