"""The client side of the agent protocol: one shell command per verb, JSON back.

The agent is uploaded on first use of a version (one extra round trip), into
``<root>/agent/<version>/`` with the Python it found recorded beside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import shlex
import sys
from contextlib import AbstractContextManager
from typing import Any, Callable

from gpujob.bundle import BUNDLE_END, bundle_tar, bundle_version, import_remote
from gpujob.errors import ConnectError, GpujobError, JobNotFound, RemoteError, link_cut
from gpujob.transport import replies
from gpujob.transport.base import Result, Stream, Transport
from gpujob.transport.endpoint import Target

SERVED: tuple[str, ...] = import_remote("core.protocol").SERVED  # what the kept `serve` process answers
NEED_AGENT = 97
NO_PYTHON = 98
CANT_WRITE = 96
PYTHON_CANDIDATES = [
    "python3", "/root/miniconda3/bin/python3", "/opt/conda/bin/python3", "/usr/bin/python3",
    "/usr/local/bin/python3", "python",
]


def shell_path(path: str) -> str:
    """Quote a remote path for sh, letting a leading ``~`` expand to ``$HOME``."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


class Agent:
    """Calls agent verbs on a host over a transport; owns the transport (``close``, ``with``)."""

    def __init__(self, transport: Transport, host: Any = None) -> None:
        self.t = transport
        self.endpoint = transport.endpoint
        # what the caller named the host by (its profile, read by the layers above), else the endpoint;
        # as typed as ``host`` is (the profile's class, config.hosts.Host, is a layer above this one)
        self.host: Any = host if host is not None else self.endpoint
        self.version = bundle_version()
        self.root = self.endpoint.root

    def close(self) -> None:
        """Release the connection (a kept one stays with its daemon for the next command)."""
        self.t.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- command lines ----------------------------------------------------------------
    def _prelude(self) -> str:
        return f'R={shell_path(self.root)}; A="$R/agent/{self.version}"; '

    def command(self, verb: str, args: list[str] | None = None) -> str:
        argv = " ".join(shlex.quote(a) for a in [verb, *(args or [])])
        return (
            self._prelude()
            + f'if [ ! -f "$A/ok" ]; then echo gpujob-agent-missing >&2; exit {NEED_AGENT}; fi; '
            # shell builtins only (no `$(cat)` subshell, no `env`): two process starts fewer per verb
            + f'read -r PY < "$A/python"; cd "$A" && export PYTHONPATH="$A" && exec "$PY" -S -m remote --root "$R" {argv}'
        )

    def _install_command(self) -> str:
        cands = list(PYTHON_CANDIDATES)
        if self.endpoint.agent_python:
            cands = [self.endpoint.agent_python]
        elif self.endpoint.is_local:
            cands.insert(0, sys.executable)
        quoted = " ".join(shlex.quote(c) for c in cands)
        return (
            self._prelude()
            + 'T="$A.tmp.$$"; PY=""; '
            + f"for p in {quoted}; do "
            + 'if command -v "$p" >/dev/null 2>&1 && "$p" -c "import sys; sys.exit(0 if sys.version_info >= (3, 8) else 1)" '
            + '>/dev/null 2>&1; then PY=$("$p" -c "import sys; print(sys.executable)"); break; fi; done; '
            + f'if [ -z "$PY" ]; then echo gpujob-no-python >&2; exit {NO_PYTHON}; fi; '
            # the bundle's last member there, or the upload was cut (tar ends well between two members)
            + f'mkdir -p "$T" && tar -x -C "$T" && [ -f "$T/{BUNDLE_END}" ] && echo "$PY" > "$T/python" '
            + f'|| {{ rm -rf "$T"; exit {CANT_WRITE}; }}; '
            # bytecode now: every agent command would otherwise compile its modules again wherever
            # PYTHONDONTWRITEBYTECODE is set or the folder is read-only later (about 0.1 s a start)
            + '"$PY" -S -m compileall -q "$T/remote" "$T/runtime" >/dev/null 2>&1; '
            + f'touch "$T/ok" || exit {CANT_WRITE}; '
            # concurrent first submits each install: a complete install (ok) already in place is
            # kept, since other commands may be importing from it
            + 'if [ ! -f "$A/ok" ]; then rm -rf "$A"; mv -T "$T" "$A" 2>/dev/null; fi; rm -rf "$T"; '
            + '[ -f "$A/ok" ] && echo "$PY"'
        )

    def install(self) -> str:
        """Upload this version of the agent; returns the Python it will run with. Of several commands
        that find it missing at once, one uploads and the others wait for it and use its install."""
        with self._install_lock():
            done = self.t.run(self._prelude() + '[ -f "$A/ok" ] && cat "$A/python"', timeout=60)
            if done.rc == 0:
                return done.text.strip()
            return self._upload()

    def _install_lock(self) -> AbstractContextManager[None]:
        """This user's lock on installing this agent version on this endpoint's root (none where the
        kept connection's private folder cannot be had: concurrent installs are still correct)."""
        from gpujob.transport.mux import mux_dir, socket_key

        folder = mux_dir()
        if folder is None:
            return contextlib.nullcontext()
        key = hashlib.sha256(f"{socket_key(self.endpoint)}\0{self.root}\0{self.version}".encode()).hexdigest()[:20]
        return import_remote("core.atomicfile").locked(folder / f"install-{key}")

    def _upload(self) -> str:
        res = self.t.run(self._install_command(), input=bundle_tar(), timeout=120)
        if res.rc == NO_PYTHON:
            raise RemoteError(
                f"no Python 3.8+ found on {self.endpoint.name} (tried {', '.join(PYTHON_CANDIDATES)})",
                "install one on the instance (apt-get install -y python3) or pick an image with Python; "
                "nothing was changed there",
            )
        if res.rc != 0:
            err = res.stderr.decode("utf-8", "replace").strip()
            if "No space left" in err:
                raise RemoteError(f"the disk holding {self.root} on {self.endpoint.name} is full", "free space there and retry")
            raise RemoteError(
                f"could not install the agent under {self.root} on {self.endpoint.name}: {err or f'exit {res.rc}'}",
                "check that the folder is writable and has free space (gpujob host set NAME --root PATH to move it)",
            )
        return res.text.strip()

    # ---- calls --------------------------------------------------------------------------
    def _raw(self, verb: str, args: list[str] | None, input: bytes | None, timeout: float | None) -> Result:
        most = replies.limit(verb)  # bytes of the reply read before it is refused (transport/replies.py)
        if verb in SERVED and self.t.keeps_agent:  # the multiplexer's kept agent
            argv = [verb, *(args or [])]
            served = self.t.serve_call(self.command("serve"), argv, timeout, input, limit=most)
            if served is not None and served.rc == NEED_AGENT:
                self.install()
                served = self.t.serve_call(self.command("serve"), argv, timeout, input, limit=most)
            if served is not None:
                return served
        res = self.t.run(self.command(verb, args), input=input, timeout=timeout, limit=most)
        if res.rc == NEED_AGENT:
            self.install()
            res = self.t.run(self.command(verb, args), input=input, timeout=timeout, limit=most)
        return res

    def call(self, verb: str, args: list[str] | None = None, input: bytes | None = None,
             timeout: float | None = None) -> Any:
        """Run a verb and return its JSON document; agent errors become ``RemoteError``, a reply
        too large, too deep or of the wrong shape ``replies.UnreadableReply``. ``timeout``:
        the verb's own (``replies.TIMEOUTS``: seconds for a status) unless given."""
        res = self._raw(verb, args, input, timeout if timeout is not None else replies.timeout(verb))
        return self._parse(verb, res, args)

    def _refused(self, doc: dict[str, Any]) -> RemoteError:
        """The agent's error document as an exception; a job not found names the host searched."""
        if doc.get("code") == "not_found":
            return JobNotFound(str(doc["error"]).replace("on this host", f"on {self.endpoint.name}"),
                               doc.get("remedy", ""))
        return RemoteError(doc["error"], doc.get("remedy", ""))

    def _parse(self, verb: str, res: Result, args: list[str] | None = None) -> Any:
        if len(res.stdout) > replies.limit(verb):
            raise replies.too_large(self.endpoint.name, replies.limit(verb))
        text = res.text.strip()
        doc: Any = replies.parse(verb, self.endpoint.name, text) if text else None
        if isinstance(doc, dict) and "error" in doc and res.rc != 0:
            raise self._refused(doc)
        if res.rc < 0 and doc is None:  # no exit status came back: the link, not the agent, failed
            raise link_cut(self.endpoint, f"{verb!r} call", res.rc, again_after_cut(verb, args))
        if res.rc != 0 or doc is None:
            err = res.stderr.decode("utf-8", "replace").strip()[-2000:]
            if res.rc == 127 or "not found" in err and "python" in err.lower():
                raise RemoteError(
                    f"the agent's Python on {self.endpoint.name} is gone ({err})",
                    f"run gpujob doctor {self.endpoint.name}; the agent is reinstalled after: rm -rf {self.root}/agent",
                )
            raise RemoteError(f"agent verb {verb!r} failed on {self.endpoint.name} (exit {res.rc}): {err or text[-500:]}",
                              f"see the agent log: gpujob doctor {self.endpoint.name}")
        return doc

    def stream(self, verb: str, args: list[str] | None = None) -> Stream:
        """Start a streaming verb (receive, send, logs). Installs the agent first if needed."""
        served = self.t.serve_call(self.command("serve"), ["hello"], 60) if self.t.keeps_agent else None
        if served is None or served.rc != 0:  # the kept agent answering proves the install; else look
            probe = self.t.run(self._prelude() + 'test -f "$A/ok"', timeout=60)
            if probe.rc != 0:
                self.install()
        return self.t.stream(self.command(verb, args))


    def stream_doc(self, verb: str, args: list[str] | None = None,
                   again: str = "run the command again (a transfer resumes)",
                   before: Callable[[Stream], None] | None = None) -> tuple[Stream, dict[str, Any]]:
        """Start a streaming verb whose first line is a JSON document (sync, send --manifest).

        Installs the agent once if it is missing; an error document becomes ``RemoteError``.
        ``before(stream)`` runs once the command is started, before its first line is read
        (what it writes to the command's stdin travels without waiting for that line).
        """
        most = replies.limit(verb)
        for attempt in (0, 1):
            s = self.t.stream(self.command(verb, args))
            if before is not None:
                before(s)
            line = s.stdout.readline(most + 1)
            if line:
                if len(line) > most or not line.endswith(b"\n"):
                    s.kill()
                    raise replies.too_large(self.endpoint.name, most) if len(line) > most else \
                        replies.unreadable(self.endpoint.name, f"an unfinished first line of its {verb!r} reply")
                doc = replies.parse(verb, self.endpoint.name, line.decode("utf-8", "replace"))
                if doc is None:
                    s.kill()
                    raise replies.unreadable(self.endpoint.name, f"no JSON in its {verb!r} reply")
                if "error" in doc:
                    s.kill()
                    raise self._refused(doc)
                return s, doc
            s.close_stdin()
            rc = s.wait(60)
            if rc == NEED_AGENT and attempt == 0:
                self.install()
                continue
            if rc < 0:
                raise link_cut(self.endpoint, f"{verb!r} call", rc, again)
            raise RemoteError(f"the agent on {self.endpoint.name} did not answer {verb!r} (exit {rc}): {s.stderr_text()[-1000:]}",
                              f"see the agent log: gpujob agent-log {self.endpoint.name}")
        raise AssertionError("unreachable")


# verbs that change something on the host: a cut link leaves unknown whether they were done
CHANGING = {"submit", "stop", "resume", "adopt", "moved", "rm", "gc"}


def again_after_cut(verb: str, args: list[str] | None = None) -> str:
    """The next step after a link cut during ``verb``: a read is asked again; a change may have
    been made before the cut, so the user looks first (a second resume of a resumed job is refused)."""
    if verb not in CHANGING:
        return "run the command again (a transfer resumes)"
    args = args or []
    job = args[args.index("--job") + 1] if "--job" in args[:-1] else ""
    look = f"gpujob status {job}" if job and verb not in ("rm", "gc") else "gpujob ls --all"
    return f"the {verb} may have been done on the host before the cut: {look} shows where things stand; " \
           "run the command again if it was not"


def connect_agent(host: Target) -> Agent:
    """Open a transport to ``host`` (a profile or an ``Endpoint``) and wrap it."""
    from gpujob.transport import connect

    try:
        agent = Agent(connect(host), host)
    except GpujobError:
        raise
    except OSError as e:  # pragma: no cover - connect maps known errors already
        raise ConnectError(f"cannot reach {host.address}: {e}", "check the network and the host profile") from None
    if not agent.t.keeps_agent and not agent.endpoint.is_local:  # a first command: the daemon it starts keeps the agent
        from gpujob.transport import mux

        mux.warm_serve(agent.endpoint, agent.command("serve"))
    return agent
