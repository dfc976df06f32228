"""A job moving between hosts: the receiving side (``adopt``) and the leaving side (``moved``).

The laptop pipes the old host's verified ``send`` stream (or its own pulled copy) into
``adopt`` on the new host: the job's files land in ``<root>/incoming/<job id>/`` (out of
``jobs/``, so no reader takes a half-received job for a lost one), verified and resumable
(a cut stream keeps what arrived; the next ``adopt`` asks only for the rest). Then the
folder becomes ``jobs/<job id>/`` and the job starts under the same id, from its newest
complete checkpoint, with its events, metrics and log continuing.
"""

import json
import time
from typing import IO, Any, Dict, List, Mapping

from remote.core import locks, procs
from remote.core.errors import AgentError
from remote.core.layout import JobDir, Root, now
from remote.jobs.inbox import incoming_dir
from remote.jobs.store import judged, live_status, resolve
from remote.jobs.submit import submit
from remote.stream import CHUNK, read_items, tree
from remote.stream.tree import Tree


def incoming(root: Root, job_id: str) -> JobDir:
    if not job_id or "/" in job_id or job_id.startswith("."):
        raise AgentError("bad job id {!r}".format(job_id), "give the job id gpujob printed", "bad_request")
    return incoming_dir(root, job_id)


def wanted(have: Tree, offered: Dict[str, Any], skip_ckpt: bool) -> List[Any]:
    """What to ask the sender for: entries of ``offered`` (a send manifest) missing from or
    different in ``have`` (a ``tree`` of the incoming folder), a cut file as
    ``[rel, chunks already here]``. status.json stays behind: the new host writes its own."""
    want = []  # type: List[Any]
    for d in offered.get("dirs", []):
        if d not in have["dirs"] and not (skip_ckpt and (d + "/").startswith("ckpt/")):
            want.append(d)
    for rel, meta in sorted(offered.get("files", {}).items()):
        if rel == "status.json" or (skip_ckpt and (rel + "/").startswith("ckpt/")):
            continue
        here = have["files"].get(rel)
        if here is not None and here[:2] == meta[:2] and here[3] == meta[3]:
            continue
        prefix = have["parts"].get(rel) or []
        want.append([rel, prefix[: max(0, (meta[0] - 1) // CHUNK)]] if prefix and meta[3] is None else rel)
    return want


def adopt(root: Root, stdin: IO[bytes], stdout: IO[bytes]) -> Mapping[str, object]:
    """Line 1 of stdin: the submit request plus ``moved_from``, ``previous`` (the old status)
    and ``offered`` (the sender's manifest). Answers the wish list as one line, applies the
    stream that follows, then creates and starts the job (``jobs.submit``)."""
    request = json.loads(stdin.readline().decode("utf-8") or "{}")
    with locks.lease_back_on_failure(root.root, request):
        return _adopt(root, request, stdin, stdout)


def _adopt(root: Root, request: Dict[str, Any], stdin: IO[bytes], stdout: IO[bytes]) -> Mapping[str, object]:
    job_id = request.get("job_id") or ""
    inbox = incoming(root, job_id)
    here = root.job(job_id)
    if here.path.exists():
        st = live_status(root, here, procs.boot_id())
        if st.state != "moved":
            raise AgentError("job {} already exists on this host ({})".format(job_id, st.state),
                             "gpujob resume {} --host THIS_HOST continues it here".format(job_id), "exists")
    inbox.path.mkdir(parents=True, exist_ok=True)
    # shared storage (an absolute checkpoint.dir) is already there; a relative one is the job's own ckpt/
    skip_ckpt = str((request.get("spec") or {}).get("checkpoint_dir") or "").startswith(("/", "~"))
    want = wanted(tree(inbox.path), request.get("offered") or {}, skip_ckpt)
    stdout.write(json.dumps({"want": want}).encode() + b"\n")
    stdout.flush()
    got = read_items(inbox.path, stdin, links_out=False)  # verified; a cut stream keeps what came
    res = submit(root, request)
    res.update(received_files=got["written"], received_bytes=got["bytes"])
    return res


def mark_moved(root: Root, ref: str, to: str) -> Mapping[str, object]:
    """The job left for host ``to``: a final state here, so it cannot be resumed on this host."""
    job = root.job(resolve(root, ref))
    with locks.job_lock(job.path, removed_is_error=True):  # judged under the lock: a resume may be restarting it
        st, verdict = judged(root, job, procs.boot_id())
        if verdict.lives:
            raise AgentError("job {} is still {} here".format(job.id, st.state),
                             "stop it first: gpujob stop {}".format(job.id), "bad_state")
        fresh = job.record()
        fresh.update(state="moved", moved_to=to, ended_at=fresh.ended_at or now(), reason="moved to " + to)
        job.write_record(fresh)
        job.event("state", state="moved", reason="moved to " + to)
    return {"job_id": job.id, "state": "moved", "moved_to": to, "t": time.time()}
