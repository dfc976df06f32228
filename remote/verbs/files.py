"""The verbs that move files: a project's sync (``sync``, or ``manifest`` then ``receive``, the lease
given back with ``unlease``), a large file's ranged upload (``range``, ``range_serve``), the seals
(``reseal``), and ``send`` (a job's files, for pull and move)."""

import argparse
import contextlib
import json
import sys
from typing import Any, Iterator, Mapping

from remote.core import locks
from remote.core.errors import AgentError
from remote.core.jsontypes import JSONObject
from remote.core.layout import Root
from remote.core.protocol import LEASE_WAIT
from remote.jobs.store import resolve
from remote.verbs.answer import handled, out


class _OnUse:
    """``remote.data.transfer`` (with its stream and checkpoint modules, a third of a start's imports),
    imported when a verb that moves files first uses it: ``status`` and ``hello`` never do."""

    def __getattr__(self, name: str) -> Any:
        from remote.data import transfer as mod

        return getattr(mod, name)


transfer = _OnUse()




def _busy(a: argparse.Namespace, left: float) -> AgentError:
    return AgentError("another submit of project {} is still syncing to this host (its lease ends in {:.0f} s at "
                      "most)".format(a.project, left), "wait for it to finish, then submit again", "project_busy")


def _lease_lost(a: argparse.Namespace) -> AgentError:
    return AgentError("another submit of project {} took over its code while this one was quiet for longer than "
                      "{:.0f} s".format(a.project, locks.lease_ttl()), "submit again", "lease_lost")


def sync(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    """Manifest, then receive, on one channel (see transfer.session); with ``--lease``, under
    the project's sync lease (waited for here: this command has a process of its own)."""
    root.ensure()
    if a.lease:
        left = locks.take_lease(root.root, a.project, a.lease, LEASE_WAIT)
        if left is not None:
            raise _busy(a, left)
        with locks.lease_kept(root.root, a.project, a.lease):
            return transfer.session(root.root, a.dir, a.hash_dir, sys.stdin.buffer, sys.stdout.buffer, a.known, a.shape)
    return transfer.session(root.root, a.dir, a.hash_dir, sys.stdin.buffer, sys.stdout.buffer, a.known, a.shape)


def manifest(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    """The first half of ``sync`` on its own (the kept ``serve`` process answers it). With
    ``--lease``, a project's lease held by another submit answers ``{"busy": seconds}`` at
    once: the kept process serves other clients too, so the client waits, not this one."""
    root.ensure()
    if a.lease:
        left = locks.try_lease(root.root, a.project, a.lease)
        if left is not None:
            return {"busy": left}
    return transfer.manifest_doc(root.root, a.dir, a.hash_dir, known=a.known, shapes=a.shape)


def unlease(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    """Give a submit's sync lease back (its client stopped before the upload or the snapshot)."""
    locks.give_back(root.root, a.project, a.lease)
    return {"released": True}


def receive(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    """The second half of ``sync``: apply the upload stream on stdin (a small one, in ``serve``)."""
    root.ensure()
    if a.lease:
        with locks.lease_kept(root.root, a.project, a.lease) as ours:
            if not ours:
                raise _lease_lost(a)
            return transfer.receive(root.root, sys.stdin.buffer, transfer.hash_cache(root.root))
    return transfer.receive(root.root, sys.stdin.buffer, transfer.hash_cache(root.root))


def range_channel(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    """One channel of a large file's ranged upload (remote/stream/ranges.py)."""
    return _range(root, a, sys.stdin.buffer, sys.stdout.buffer)


def _range(root: Root, a: argparse.Namespace, stdin: Any, stdout: Any) -> Mapping[str, object]:
    from remote.stream.ranges import receive_ranges

    root.ensure()
    ks = [int(k) for k in a.ranges.split(",") if k.strip().isdigit()]

    @contextlib.contextmanager
    def hold() -> Iterator[None]:  # taken once the data comes (the channel may open before the manifest)
        with locks.lease_kept(root.root, a.project, a.lease) as ours:
            if not ours:
                raise _lease_lost(a)
            yield

    res = receive_ranges(root.root, a.name, a.size, a.span, ks, stdin, stdout,
                         transfer.hash_cache(root.root), hold if a.lease else None)
    if res.get("committed"):  # the sync's own receive may have ended (and resealed) before this file was in
        transfer.spawn_reseal(root.root)
    return res


RANGE_HEADER = {"name": str, "size": int, "span": int, "ranges": str, "project": str, "lease": str}


def range_serve(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    """Every range channel of one sync in this one process, over TCP connections on 127.0.0.1
    (remote/stream/rangeserve.py ``serve``): each speaks what a ``range`` command's stdin and stdout
    do, with its arguments in a header; ends when this command's stdin does."""
    from remote.stream.ranges import held_files
    from remote.stream.rangeserve import serve

    root.ensure()
    try:
        files = json.loads(a.files or "[]")
    except ValueError:
        files = []

    def handle(head: JSONObject, rfile: Any, wfile: Any) -> int:
        def answer(doc: Any) -> None:
            wfile.write((json.dumps(doc, sort_keys=True) + "\n").encode())
            wfile.flush()

        ns = argparse.Namespace(**{k: head.get(k) if isinstance(head.get(k), t) else None for k, t in RANGE_HEADER.items()})
        if ns.name is None or ns.size is None or ns.span is None or ns.ranges is None:
            answer({"error": "a range channel's header lacks name, size, span or ranges", "remedy": "upgrade gpujob",
                    "code": "agent_error"})
            return 2
        rc, result = handled(root, "range", lambda: _range(root, ns, rfile, wfile), answer)
        if rc is None:
            answer(result)
        return rc or 0

    return serve(sys.stdin.buffer, sys.stdout.buffer, handle, {"have": held_files(root.root, files)})


def reseal(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    """Bring the synced trees' seals up to date (started detached after a receive)."""
    return transfer.reseal(root.root)


def send(root: Root, a: argparse.Namespace) -> None:
    job = root.job(resolve(root, a.job))
    if a.manifest:  # the pull manifest (JSON), then the client asks for what it lacks with --list
        doc = transfer.select(job.path, a.select, a.metric, a.include)
        if "error" in doc:
            from remote.jobs.saved import stray_checkpoints

            stray = stray_checkpoints(job, job.job_spec(), job.record())
            raise AgentError(doc["error"] + " in job " + job.id + ("; " + stray["advice"] if stray else ""),
                             transfer.stray_hint(doc["stray"]) if doc.get("stray")
                             else "gpujob pull {} without --{} brings every file of the job; or pick another "
                                  "job".format(job.id, "best" if a.select == "best" else "latest"), "no_checkpoint")
        doc["job_id"] = job.id
        sources = doc.pop("sources", None)  # the agent's own paths stay here
        if a.write_wait is not None:  # files some process is writing now: the client says it waits
            from remote.ckpt import writing

            held = writing.writers([str(job.path / rel) for rel in doc.get("files", {})
                                    if not transfer.appended_only(rel)])
            doc["writing"] = {rel: held[str(job.path / rel)] for rel in doc.get("files", {})
                              if str(job.path / rel) in held}
        out(doc)
        if not a.list:
            return
        line = sys.stdin.buffer.readline()  # the client's wish list answers on the same channel
        transfer.send_list(job.path, json.loads(line.decode() or "[]"), sys.stdout.buffer, a.write_wait, sources)
        sys.stdout.buffer.flush()
        return
    if a.list:
        transfer.send_list(job.path, json.loads(sys.stdin.read()), sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return
    members = [m for m in a.what.split(",") if m]
    transfer.send(job.path, members, sys.stdout.buffer)
    sys.stdout.buffer.flush()
