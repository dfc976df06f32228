"""``python3 -m remote VERB --root ROOT ...``: one JSON document (or byte stream) per verb.

This module is the verb table, the parser and the dispatch; each verb's handler is in remote/verbs/
(the table names it), and only the running verb's module is imported: a start stays cheap, and
the kept ``serve`` process loads a verb's modules when it first answers it.
"""

import argparse
import importlib
import os
import sys
from typing import Any, Callable, List, Optional

from remote.core.layout import Root, agent_log
from remote.core.spec import STOP_WAIT
from remote.verbs.answer import handled, out

# verb -> "module.handler" in remote/verbs/; each handler takes (root, parsed arguments). In the
# parser's order: a one-verb parser names them all in its usage, as the whole parser does.
VERBS = {
    "hello": "host.hello", "status": "jobs.status", "submit": "jobs.submit", "stop": "jobs.stop",
    "resume": "jobs.resume", "sync": "files.sync", "manifest": "files.manifest", "receive": "files.receive",
    "range": "files.range_channel", "range_serve": "files.range_serve", "unlease": "files.unlease",
    "reseal": "files.reseal", "send": "files.send", "logs": "observe.logs", "watch": "observe.watch",
    "tb": "observe.tb", "port": "observe.port", "agentlog": "observe.agentlog", "gpus": "host.gpus",
    "serve": "serve.serve", "run": "jobs.run", "doctor": "host.doctor", "bench": "host.bench",
    "notify_lost": "jobs.notify_lost", "adopt": "jobs.adopt", "moved": "jobs.moved", "pulled": "jobs.pulled",
    "rm": "cleanup.rm", "gc": "cleanup.gc_verb", "authkeys": "host.authkeys",
    "idle_shutdown": "host.idle_shutdown", "idle_watch": "host.idle_watch", "exec": "execute.exec_job",
}
# range_serve: its stdout may be gone at the end; exec: its handler writes its first line, then becomes the command
STREAMING = {"send", "logs", "serve", "range_serve", "exec"}


def handler(verb: str) -> Callable[[Root, argparse.Namespace], Any]:
    """The verb's handler, its module imported now."""
    module, _, name = VERBS[verb].rpartition(".")
    call = getattr(importlib.import_module("remote.verbs." + module), name)
    if verb == "serve":  # the kept process answers each request as a one-shot command would: with main
        return lambda root, a: call(root, main)
    return call


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


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, its width found as ``shutil.get_terminal_size`` finds it but without
    importing ``shutil`` (and its zlib, bz2 and lzma): argparse makes a formatter for every argument
    it adds, so every verb's start paid that import for help it does not print."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: Optional[int] = None) -> None:
        if width is None:
            width = _columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)


def _columns() -> int:
    """The terminal's columns: $COLUMNS, else stdout's terminal, else 80 (``shutil.get_terminal_size``)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ is not None else 0
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Unbuilt:
    """The parser of a verb this process does not run: every call on it is taken and dropped."""

    def __getattr__(self, name: str) -> Callable[..., "_Unbuilt"]:
        return lambda *a, **kw: self


class _OnlyVerb:
    """The verbs' subparsers, of which only ``only`` (every one when None) is built: argparse's
    parser objects, each with its gettext look-ups of message catalogues (stats of .mo files),
    were a third of a short verb's start (issue 38)."""

    def __init__(self, real: Any, only: Optional[str]) -> None:
        self.real, self.only = real, only

    def add_parser(self, name: str, **kw: Any) -> Any:
        if self.only is not None and name != self.only:
            return _Unbuilt()
        return self.real.add_parser(name, formatter_class=_Formatter, **kw)


def verb_of(argv: List[str]) -> Optional[str]:
    """The verb in an agent command line (``--root`` may come before it), None if there is none."""
    words = iter(argv)
    for w in words:
        if w == "--root":
            next(words, None)
        elif not w.startswith("-"):
            return w if w in VERBS else None
        elif not w.startswith("--root="):
            return None  # -h, or an option the top level does not take: the whole parser answers
    return None


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The agent's command line; with ``only`` (the verb a process runs), that verb's parser alone,
    its usage and help the same as the whole parser's."""
    p = argparse.ArgumentParser(prog="gpujob-agent", formatter_class=_Formatter)
    p.add_argument("--root", default=os.environ.get("GPUJOB_ROOT", "~/.gpujob"))
    every = None if only is None else "{" + ",".join(VERBS) + "}"  # what the whole parser's usage names
    sub = _OnlyVerb(p.add_subparsers(dest="verb", required=True, metavar=every), only)
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
    s.add_argument("--reason", default="stopped by user", help="why, as the job's reason says (the account's budget)")
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
    s.add_argument("--slurm", action="store_true", help="the login node of a Slurm cluster: check the cluster too")
    s.add_argument("--partition", help="Slurm: the profile's partition (default: the cluster's)")
    s.add_argument("--account")
    s.add_argument("--qos")
    s.add_argument("--slurm-wait", type=float, default=60.0, help="s a test job may wait to start (then: busy)")
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
    s = sub.add_parser("exec", help="a command (or a shell) where a job runs, in its folder and environment")
    s.add_argument("--job", required=True)
    s.add_argument("--command", help="a shell line")
    s.add_argument("--shell", action="store_true", help="an interactive shell instead (a terminal's)")
    s.add_argument("--check", action="store_true", help="say where it would run; run nothing")
    return p


def main(argv: List[str]) -> int:
    # the root may come before or after the verb
    args = build_parser(only=verb_of(argv)).parse_args(argv)
    root = Root(args.root)
    load_agent_env(root)
    call = handler(args.verb)
    if args.verb not in ("run", "notify_lost", "idle_watch", "serve", "reseal", "range", "range_serve"):  # a sync's extra channels
        from remote.jobs import lost  # a job found lost is announced once, by a detached sender

        lost.spawn_lost_check(root)
        from remote.run import power  # the idle watcher comes back after a reboot

        try:
            power.revive_idle_watch(root)
        except Exception as e:  # never let it block the verb
            agent_log(root, "could not restart the idle watcher: {}".format(e))
    rc, result = handled(root, args.verb, lambda: call(root, args), out)
    if rc is not None:
        return rc
    if args.verb == "run":
        return int(result or 0)
    if args.verb not in STREAMING:
        out(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
