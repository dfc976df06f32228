"""``python3 -m remote VERB --root ROOT ...``: one JSON document (or byte stream) per verb."""

import argparse
import contextlib
import errno
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from remote import AGENT_PROTOCOL
from remote.core import layout, locks, procs
from remote.core.layout import Root, agent_log
from remote.core.protocol import LEASE_WAIT, SERVED, SETTLED, TERMINAL
from remote.core.spec import STOP_WAIT
from remote.jobs import store as jobs
from remote.jobs.store import AgentError


class _OnUse:
    """``remote.data.transfer`` (with its stream and checkpoint modules, a third of a start's imports),
    imported when a verb that moves files first uses it: ``status`` and ``hello`` never do."""

    def __getattr__(self, name: str) -> Any:
        from remote.data import transfer as mod

        return getattr(mod, name)


transfer = _OnUse()


def _out(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, sort_keys=True))
    sys.stdout.write("\n")
    sys.stdout.flush()


def cmd_hello(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    return {"protocol": AGENT_PROTOCOL, "python": sys.version.split()[0], "executable": sys.executable,
            "root": str(root.root), "boot_id": procs.boot_id(), "agent": layout.AGENT_DIR.name}


def cmd_status(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    if a.job:
        job_id = jobs.resolve(root, a.job)
        return {"jobs": [jobs.describe(root, job_id, detail=True)], "now": time.time()}
    from remote.jobs import index as jobindex

    ids, older, done = jobindex.listing(root, everything=a.all or bool(a.limit))
    if a.limit:
        ids = ids[-a.limit:]
    described = [_listed(root, i) for i in ids]
    for i, d in zip(ids, described):
        d.setdefault("job_id", i)  # a damaged status.json still names its job
    finished = [i for i, d in zip(ids, described)  # lost ones stay: resumable, and still to be announced
                if d.get("state") in SETTLED and i not in done]
    for i in finished:  # the next listing skips them without reading their folders
        try:
            with locks.job_lock(root.job(i).path):  # judged again: a resume in between keeps it listed
                if root.job(i).status().get("state") in SETTLED:
                    jobindex.mark(root, [i], True)
        except OSError:  # a full or read-only disk: the listing still answers
            pass
    return {"jobs": described, "now": time.time(), "older": older, "instance": root.instance_id()}


def _listed(root: Root, job_id: str) -> Dict[str, Any]:
    """A job's line in a listing; a damaged record costs its own line only."""
    try:
        return jobs.describe(root, job_id)
    except AgentError as e:
        st = root.job(job_id).status()
        return {"job_id": job_id, "name": st.get("name"), "state": st.get("state") or "unknown",
                "error": e.message, "remedy": e.remedy, "last_line": e.message[:200]}


def cmd_submit(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    request = json.loads(sys.stdin.read())
    with locks.lease_back_on_failure(root.root, request):
        res = jobs.submit(root, request)
    st = jobs.wait_started(root.job(res["job_id"]), 3.0)
    if st:
        res["state"] = st.get("state")
    return res


def cmd_stop(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    from remote.stopping import verb

    after = None if a.after_checkpoint is None else -1.0 if a.after_checkpoint == "auto" else float(a.after_checkpoint)
    return verb.stop(root, jobs.resolve(root, a.job), a.wait, after_checkpoint=after,
                     job_mode=a.job_mode)


def cmd_resume(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    return jobs.resume(root, jobs.resolve(root, a.job))


def _busy(a: argparse.Namespace, left: float) -> AgentError:
    return AgentError("another submit of project {} is still syncing to this host (its lease ends in {:.0f} s at "
                      "most)".format(a.project, left), "wait for it to finish, then submit again", "project_busy")


def _lease_lost(a: argparse.Namespace) -> AgentError:
    return AgentError("another submit of project {} took over its code while this one was quiet for longer than "
                      "{:.0f} s".format(a.project, locks.lease_ttl()), "submit again", "lease_lost")


def cmd_sync(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
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


def cmd_manifest(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    """The first half of ``sync`` on its own (the kept ``serve`` process answers it). With
    ``--lease``, a project's lease held by another submit answers ``{"busy": seconds}`` at
    once: the kept process serves other clients too, so the client waits, not this one."""
    root.ensure()
    if a.lease:
        left = locks.try_lease(root.root, a.project, a.lease)
        if left is not None:
            return {"busy": left}
    return transfer.manifest_doc(root.root, a.dir, a.hash_dir, known=a.known, shapes=a.shape)


def cmd_unlease(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    """Give a submit's sync lease back (its client stopped before the upload or the snapshot)."""
    locks.give_back(root.root, a.project, a.lease)
    return {"released": True}


def cmd_receive(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    """The second half of ``sync``: apply the upload stream on stdin (a small one, in ``serve``)."""
    root.ensure()
    if a.lease:
        with locks.lease_kept(root.root, a.project, a.lease) as ours:
            if not ours:
                raise _lease_lost(a)
            return transfer.receive(root.root, sys.stdin.buffer, transfer.hash_cache(root.root))
    return transfer.receive(root.root, sys.stdin.buffer, transfer.hash_cache(root.root))


def cmd_range(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    """One channel of a large file's ranged upload (remote/stream/ranges.py)."""
    return _range(root, a, sys.stdin.buffer, sys.stdout.buffer)


def _range(root: Root, a: argparse.Namespace, stdin: Any, stdout: Any) -> Dict[str, Any]:
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


def cmd_range_serve(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    """Every range channel of one sync in this one process, over TCP connections on 127.0.0.1
    (remote/stream/ranges.py ``serve``): each speaks what a ``range`` command's stdin and stdout
    do, with its arguments in a header; ends when this command's stdin does."""
    from remote.stream.ranges import held_files, serve

    root.ensure()
    try:
        files = json.loads(a.files or "[]")
    except ValueError:
        files = []

    def handle(head: Dict[str, Any], rfile: Any, wfile: Any) -> int:
        def out(doc: Any) -> None:
            wfile.write((json.dumps(doc, sort_keys=True) + "\n").encode())
            wfile.flush()

        ns = argparse.Namespace(**{k: head.get(k) if isinstance(head.get(k), t) else None for k, t in RANGE_HEADER.items()})
        if ns.name is None or ns.size is None or ns.span is None or ns.ranges is None:
            out({"error": "a range channel's header lacks name, size, span or ranges", "remedy": "upgrade gpujob",
                 "code": "agent_error"})
            return 2
        rc, result = _handled(root, "range", lambda: _range(root, ns, rfile, wfile), out)
        if rc is None:
            out(result)
        return rc or 0

    return serve(sys.stdin.buffer, sys.stdout.buffer, handle, {"have": held_files(root.root, files)})


def cmd_reseal(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    """Bring the synced trees' seals up to date (started detached after a receive)."""
    return transfer.reseal(root.root)


def cmd_send(root: Root, a: argparse.Namespace) -> None:
    job = root.job(jobs.resolve(root, a.job))
    if a.manifest:  # the pull manifest (JSON), then the client asks for what it lacks with --list
        doc = transfer.select(job.path, a.select, a.metric, a.include)
        if "error" in doc:
            stray = jobs.stray_checkpoints(job, job.spec_data(), job.status())
            raise AgentError(doc["error"] + " in job " + job.id + ("; " + stray["advice"] if stray else ""),
                             transfer.stray_hint(doc["stray"]) if doc.get("stray")
                             else "gpujob pull {} without --{} brings every file of the job; or pick another "
                                  "job".format(job.id, "best" if a.select == "best" else "latest"), "no_checkpoint")
        doc["job_id"] = job.id
        sources = doc.pop("sources", None)  # the agent's own paths stay here
        if a.write_wait is not None:  # files some process is writing now: the client says it waits
            from remote.ckpt import writing

            held = writing.writers([str(job.path / rel) for rel in doc.get("files", {}) if rel not in transfer.LOGS])
            doc["writing"] = {rel: held[str(job.path / rel)] for rel in doc.get("files", {})
                              if str(job.path / rel) in held}
        _out(doc)
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


def cmd_logs(root: Root, a: argparse.Namespace) -> None:
    """A header line ``gpujob-log JOB OFFSET``, then output.log's bytes from OFFSET.

    With ``--lines N`` the offset is that of the last N lines; with ``--follow`` the
    stream goes on until the job has ended and the file is drained.
    """
    job_id = jobs.resolve(root, a.job)
    job = root.job(job_id)
    out = sys.stdout.buffer
    offset = a.offset if a.lines is None else _offset_of_last_lines(job.log, a.lines)
    if a.since is not None:
        from remote.view import observe

        offset = observe.offset_since(job, a.since if a.since > 0 else time.time() + a.since)
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
        st = jobs.live_status(root, job, procs.boot_id())
        if st.get("state") in TERMINAL and time.time() - idle_since > 0.5:
            return
        time.sleep(0.25)


def cmd_watch(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    from remote.view import observe

    return observe.watch(root, a.job, a.points)


def cmd_tb(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    from remote.view import observe

    if a.stop:
        return observe.stop_tensorboard(root, a.job)
    if getattr(a, "install", False):
        return observe.install_tensorboard(root, a.job)
    return observe.tensorboard(root, a.job, a.port, a.wait)


def cmd_port(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    """Whether something listens on 127.0.0.1:PORT here, and AutoDL's URL for it if exposed."""
    from remote.view import observe

    return {"port": a.port, "listening": observe._listening(a.port), "autodl_url": observe.autodl_url(a.port)}


def cmd_agentlog(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    """The last N lines of ``<root>/agent.log`` (the agent's own errors)."""
    from remote.core.layout import tail_lines

    return {"path": str(root.agent_log), "lines": tail_lines(root.agent_log, a.lines, 1 << 20)}


def cmd_gpus(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    """A fresh nvidia-smi sample (None on a CPU host; ``smi_error`` says why when an nvidia-smi is
    there and fails), who holds which GPU, and the queue."""
    from remote.host import gpus

    prefix = a.path_prefix or os.environ.get("GPUJOB_PATH_PREFIX", "")  # the host profile's, as a job gets it
    found, error = gpus.probe(prefix)
    return {"gpus": found, "smi_error": error or None, "held": gpus.taken(root, ""), "queue": gpus.queue(root)}


def cmd_adopt(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    """A job moving here: request line in, wish list out, its files in, the job started."""
    from remote.jobs import move

    return move.adopt(root, sys.stdin.buffer, sys.stdout.buffer)


def cmd_moved(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    from remote.jobs import move

    return move.mark_moved(root, a.job, a.to)


def load_agent_env(root: Root) -> None:
    """``<root>/agent.env`` (KEY=VALUE lines) sets the agent's own settings on hosts where
    the SSH login cannot pass them (e.g. GPUJOB_BOOT_ID_FILE, GPUJOB_GPU_SAMPLE)."""
    try:
        text = (root.root / "agent.env").read_text()
    except OSError:
        return
    for line in text.splitlines():
        k, sep, v = line.strip().partition("=")
        if sep and k and not k.startswith("#"):
            os.environ.setdefault(k.strip(), v.strip())


def cmd_notify_lost(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    from remote.run import events

    return events.notify_lost(root, a.job_id)


def cmd_pulled(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    from remote.run import power

    return power.mark_pulled(root.job(jobs.resolve(root, a.job)))


def cmd_idle_shutdown(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    """Install (minutes > 0) or remove (0) the idle watcher; stdin: {"command": shutdown command}."""
    from remote.run import power

    req = json.loads(sys.stdin.read() or "{}")
    return power.install_idle_watch(root, a.minutes, req.get("command"))


def cmd_authkeys(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    """Add or remove a public key where this host's sshd reads them (``host rekey``); stdin: the request."""
    from remote.host import authkeys

    return authkeys.change(json.loads(sys.stdin.read() or "{}"))


def cmd_idle_watch(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    from remote.run import power

    req = json.loads(sys.stdin.read() or "{}")
    return {"exit": power.idle_watch(root, a.minutes, req.get("command"), a.poll)}


def cmd_run(root: Root, a: argparse.Namespace) -> int:
    from remote.run import supervisor

    return supervisor.main(root, a.job_id)


def cmd_doctor(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    from remote.host import doctor

    job = None
    if a.job_run is not None or a.job_python is not None:
        job = {"run": a.job_run or "", "python": a.job_python or "", "setup": a.job_setup}
    return doctor.report(root, a.data_disk, a.turbo_file, a.path_prefix, a.torch_timeout, job)


def cmd_bench(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    from remote.host import bench

    return bench.run(root, a.data_disk, a.path_prefix, a.budget)


def cmd_rm(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    from remote.jobs import cleanup

    return cleanup.remove(root, a.job, a.force, a.wait)


def cmd_gc(root: Root, a: argparse.Namespace) -> Dict[str, Any]:
    from remote.jobs import cleanup

    return cleanup.gc(root, a.older_than, a.dry_run, a.checkpoints_only)


def cmd_serve(root: Root, a: argparse.Namespace) -> None:
    """Answer quick read-only verbs, one JSON line in and one out, until stdin closes.

    The laptop's connection multiplexer keeps this process open so that ``status`` or
    ``watch`` costs one round trip and no Python start. A request is ``{"argv": [VERB, ...]}``
    with an optional ``"input"`` (base64: the verb's stdin, e.g. a small upload for
    ``receive``); the answer is ``{"rc", "out", "err"}``, what a one-shot command would give.
    """
    import base64
    import io

    real_out, real_err, real_in = sys.stdout, sys.stderr, sys.stdin
    env = dict(os.environ)
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            return
        try:
            req = json.loads(line.decode("utf-8"))
            argv = [str(x) for x in req["argv"]]
        except (ValueError, KeyError, TypeError):
            req, argv = {}, []
        if not argv or argv[0] not in SERVED:
            answer = {"rc": 2, "out": "", "err": "serve answers only: {}\n".format(", ".join(SERVED))}
        else:
            os.environ.clear()
            os.environ.update(env)  # agent.env is read afresh for every request
            out, err = io.StringIO(), io.StringIO()
            data = base64.b64decode(req.get("input") or "")
            sys.stdout, sys.stderr = out, err
            sys.stdin = io.TextIOWrapper(io.BytesIO(data))  # what a one-shot command reads on stdin
            try:
                rc = main(["--root", str(root.root), *argv])
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 2
            finally:
                sys.stdout, sys.stderr, sys.stdin = real_out, real_err, real_in
            answer = {"rc": rc, "out": out.getvalue(), "err": err.getvalue()}
        real_out.write(json.dumps(answer) + "\n")
        real_out.flush()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpujob-agent")
    p.add_argument("--root", default=os.environ.get("GPUJOB_ROOT", "~/.gpujob"))
    sub = p.add_subparsers(dest="verb", required=True)
    sub.add_parser("hello")
    s = sub.add_parser("status")
    s.add_argument("--job")
    s.add_argument("--limit", type=int, default=0)
    s.add_argument("--all", action="store_true", help="every job (else running ones and the newest finished)")
    sub.add_parser("submit")
    s = sub.add_parser("stop")
    s.add_argument("--job", required=True)
    s.add_argument("--wait", type=float, default=STOP_WAIT)
    s.add_argument("--after-checkpoint", metavar="MAX_WAIT", help="stop at the next complete checkpoint (seconds, or auto)")
    s.add_argument("--job-mode", action="store_true", help="as the job file's stop: {mode: ...} says (move)")
    s = sub.add_parser("resume")
    s.add_argument("--job", required=True)
    for name in ("sync", "manifest"):
        s = sub.add_parser(name)
        s.add_argument("--dir", action="append", default=[])
        s.add_argument("--hash-dir", action="append", default=[])
        s.add_argument("--known", action="append", default=[], help="DIR=DIGEST: the client's record of DIR")
        s.add_argument("--shape", action="append", default=[],
                       help="DIR=SHAPE: a data: entry's names and sizes on the laptop (remote/data/datashape.py)")
        s.add_argument("--project")
        s.add_argument("--lease", help="the submit's token for the project's sync lease (see remote/core/locks.py)")
    s = sub.add_parser("receive")
    s.add_argument("--project")
    s.add_argument("--lease")
    s = sub.add_parser("range", help="one channel of a large file's ranged upload")
    s.add_argument("--name", required=True)
    s.add_argument("--size", type=int, required=True)
    s.add_argument("--span", type=int, required=True, help="chunks per range")
    s.add_argument("--ranges", required=True, help="the ranges this channel carries: K,K,...")
    s.add_argument("--project")
    s.add_argument("--lease")
    s = sub.add_parser("range_serve", help="every range channel of one sync, over TCP on 127.0.0.1 (a token first)")
    s.add_argument("--files", help='the large files coming: [["NAME", SIZE, SPAN], ...] (what is held of them is answered)')
    s = sub.add_parser("unlease")
    s.add_argument("--project", required=True)
    s.add_argument("--lease", required=True)
    sub.add_parser("reseal")
    s = sub.add_parser("send")
    s.add_argument("--job", required=True)
    s.add_argument("--what", default="ckpt,output.log,metrics.jsonl,events.jsonl,status.json")
    s.add_argument("--manifest", action="store_true")
    s.add_argument("--list", action="store_true", help="stream the [rel, prefix_chunks] list read from stdin")
    s.add_argument("--select", default="all", choices=["all", "latest", "best"])
    s.add_argument("--metric")
    s.add_argument("--include", action="append", default=[])
    s.add_argument("--write-wait", type=float, help="seconds to wait for a file a process is writing (then left out)")
    s = sub.add_parser("logs")
    s.add_argument("--job", required=True)
    s.add_argument("--offset", type=int, default=0)
    s.add_argument("--follow", action="store_true")
    s.add_argument("--lines", type=int)
    s.add_argument("--since", type=float, help="epoch seconds (<= 0: seconds before now): start at the first line written then or later")
    s = sub.add_parser("watch")
    s.add_argument("--job", required=True)
    s.add_argument("--points", type=int, default=60, help="metric points per key (0: all)")
    s = sub.add_parser("tb")
    s.add_argument("--job", required=True)
    s.add_argument("--port", type=int, default=6006)
    s.add_argument("--wait", type=float, default=60.0)
    s.add_argument("--stop", action="store_true", help="stop the TensorBoard started for the job")
    s.add_argument("--install", action="store_true", help="pip-install TensorBoard into <root>/tools/tensorboard")
    s = sub.add_parser("port")
    s.add_argument("--port", type=int, required=True)
    s = sub.add_parser("agentlog")
    s.add_argument("--lines", type=int, default=50)
    s = sub.add_parser("gpus")
    s.add_argument("--path-prefix", default="")
    sub.add_parser("serve")
    s = sub.add_parser("run")
    s.add_argument("job_id")
    s = sub.add_parser("doctor")
    s.add_argument("--data-disk")
    s.add_argument("--turbo-file")
    s.add_argument("--path-prefix", default="")
    s.add_argument("--torch-timeout", type=float, default=60.0)
    s.add_argument("--job-run", help="the program a job's run: starts (doctor --job)")
    s.add_argument("--job-python", help="the job's python:")
    s.add_argument("--job-setup", action="store_true", help="the job has setup: (it may install the interpreter)")
    s = sub.add_parser("bench", help="the preflight: GPU, memory and disk rates, ECC/Xid, versions (remote/host/bench.py)")
    s.add_argument("--data-disk")
    s.add_argument("--path-prefix", default="")
    s.add_argument("--budget", type=float, default=40.0, help="seconds for the GPU steps, all GPUs together")
    s = sub.add_parser("notify_lost")
    s.add_argument("job_id")
    sub.add_parser("adopt", help="a job moving here: request line, wish list, its files (remote/jobs/move.py)")
    s = sub.add_parser("moved", help="the job went on on another host: a final state here")
    s.add_argument("--job", required=True)
    s.add_argument("--to", required=True, help="the host profile it went to")
    s = sub.add_parser("pulled")
    s.add_argument("--job", required=True)
    s = sub.add_parser("rm")
    s.add_argument("--job", required=True)
    s.add_argument("--force", action="store_true")
    s.add_argument("--wait", type=float, default=120.0)
    s = sub.add_parser("gc")
    s.add_argument("--older-than", type=float, required=True, help="seconds")
    s.add_argument("--dry-run", action="store_true")
    s.add_argument("--checkpoints-only", action="store_true")
    sub.add_parser("authkeys")
    s = sub.add_parser("idle_shutdown")
    s.add_argument("--minutes", type=float, default=0.0)
    s = sub.add_parser("idle_watch")
    s.add_argument("--minutes", type=float, required=True)
    s.add_argument("--poll", type=float, default=30.0)
    return p


STREAMING = {"send", "logs", "serve", "range_serve"}  # range_serve: its stdout may be gone at the end


def _handled(root: Root, verb: str, call: Any, out: Any) -> Tuple[Optional[int], Any]:
    """``call()``'s result as ``(None, result)``; an error is written with ``out`` as its
    document and gives ``(exit status, None)``."""
    try:
        return None, call()
    except AgentError as e:
        out({"error": e.message, "remedy": e.remedy, "code": e.code})
        return 3, None
    except BrokenPipeError:
        return 0, None
    except OSError as e:  # a full disk is the user's to fix: say so, not "agent error"
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            return _failed(root, verb, e, out), None
        agent_log(root, "verb {}: disk full: {}".format(verb, e))
        out({"error": "the disk under {} is full ({}: {})".format(root.root, e.filename or verb, e.strerror),
             "remedy": "free space there (gpujob doctor shows each disk; gpujob gc and gpujob rm remove what "
                       "old jobs left), then run the command again", "code": "disk_full"})
        return 3, None
    except Exception as e:
        return _failed(root, verb, e, out), None


def _failed(root: Root, verb: str, e: BaseException, out: Any) -> int:
    """An error nobody foresaw: logged with its traceback, answered as ``agent_error``."""
    agent_log(root, "verb {} failed: {}\n{}".format(verb, e, traceback.format_exc()))
    out({"error": "agent error in {}: {}".format(verb, e), "remedy": "see {}".format(root.agent_log),
         "code": "agent_error"})
    return 4


def main(argv: List[str]) -> int:
    # the root may come before or after the verb
    args = build_parser().parse_args(argv)
    root = Root(args.root)
    load_agent_env(root)
    handler = globals()["cmd_" + args.verb]
    if args.verb not in ("run", "notify_lost", "idle_watch", "serve", "reseal", "range", "range_serve"):  # a sync's extra channels
        from remote.jobs import lost  # a job found lost is announced once, by a detached sender

        lost.spawn_lost_check(root)
        from remote.run import power  # the idle watcher comes back after a reboot

        try:
            power.revive_idle_watch(root)
        except Exception as e:  # never let it block the verb
            agent_log(root, "could not restart the idle watcher: {}".format(e))
    rc, result = _handled(root, args.verb, lambda: handler(root, args), _out)
    if rc is not None:
        return rc
    if args.verb == "run":
        return int(result or 0)
    if args.verb not in STREAMING:
        _out(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
