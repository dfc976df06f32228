"""A large file up over several SSH channels at once (the instance side: remote/stream/ranges.py).

OpenSSH's sshd advertises a fixed 2 MB window per session channel, so one channel carries at
most 2 MB per round trip: 13 MB/s at 150 ms, 50 MB/s at 40 ms, whatever the link. A file of
at least ``GPUJOB_RANGE_MIN`` bytes (64 MiB) goes as fixed ranges of ``GPUJOB_RANGE_SPAN``
chunks (4: 16 MiB) spread over enough channels of the same connection that channels × 2 MB per
round trip covers 1 Gbit, at most ``MAX_CHANNELS`` (``GPUJOB_RANGE_CHANNELS`` forces a count).
Each chunk goes with its sha256 and is refused there when it does not match; each range has
its own sidecar of verified chunks, so a cut upload resumes range by range, sending only the
chunks the instance does not hold (those it holds are read and hashed here, not sent). Once
every channel is done, one of them commits: the whole-file hash is checked there, the part
file fsynced and renamed into place.

The channels are connections to one ``range_serve`` process per sync, opened as SSH
``direct-tcpip`` channels of the same connection (no login shell, no Python start per
channel), or, for the files the sync knows of before its manifest, dialled back by the server
to a port sshd forwards to the laptop (``gpujob/transport/dialback.py``: open as they arrive,
a round trip sooner); where the host's sshd refuses TCP channels (``AllowTcpForwarding no``)
each channel is a ``range`` command of its own, as before.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import socket
import threading
from collections.abc import Mapping
from typing import IO, Any, Callable, TypedDict

from gpujob.bundle import import_remote
from gpujob.errors import ConnectError, GpujobError, RemoteError, link_cut
from gpujob.transport import replies
from gpujob.transport.agent import Agent
from gpujob.transport.base import Stream, Transport, Tunnel, TunnelRefused

stream: Any = import_remote("stream")
ranges: Any = importlib.import_module(stream.__name__ + ".ranges")
rangeserve: Any = importlib.import_module(stream.__name__ + ".rangeserve")

RANGE_MIN = 64 << 20
SPAN = 4  # chunks per range: a cut loses at most this much of each channel's work
MAX_CHANNELS = 8
SSHD_WINDOW = 2 << 20  # what OpenSSH's sshd lets one session channel have in flight
RATE = 125e6  # bytes/s the channel count is sized to carry (1 Gbit)
# bytes of a channel's answers (what it holds: ~70 per chunk of its ranges, 2 MB for 1 TB over 8 channels;
# then a line or two): a hostile server's flood ends there
ANSWERS_MAX = 4 << 20
DIAL_WAIT = 10.0  # s a channel waits for one the server was asked to dial back, before opening one itself


def _env_int(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


def measured_rtt(agent: Agent) -> float | None:
    """The least round trip the SSH connection measured (None where it has none): one more is
    measured the first time a large upload asks (the one at login can include a delayed ACK:
    47 ms on loopback), while the manifest is on its way."""
    daemon = getattr(agent.t, "daemon", None)
    if daemon is not None:  # the kept connection: its daemon measures (None from an older one)
        if not hasattr(agent.t, "gpujob_rtt"):
            doc = daemon._ask("rtt") or {}
            agent.t.gpujob_rtt = doc.get("rtt") if isinstance(doc.get("rtt"), float) else None
        return agent.t.gpujob_rtt
    client = getattr(agent.t, "client", None)
    tr = client.get_transport() if client is not None else None
    if tr is None:
        return None
    if not getattr(tr, "gpujob_rtt_again", False):
        from gpujob.transport.ssh import probe_rtt

        tr.gpujob_rtt_again = True
        probe_rtt(tr)
    return getattr(tr, "gpujob_rtt", None)


def _login_rtt(agent: Agent) -> float | None:
    """The round trip measured at login, if it is in (no new probe: see ``measured_rtt``)."""
    client = getattr(agent.t, "client", None)
    tr = client.get_transport() if client is not None else None
    return getattr(tr, "gpujob_rtt", None) if tr is not None else None


def channels_for(rtt: float | None, nranges: int) -> int:
    """Enough channels that channels × sshd's window per round trip covers ``RATE`` (4 where
    the round trip is unknown), at most ``MAX_CHANNELS`` and one per range."""
    forced = os.environ.get("GPUJOB_RANGE_CHANNELS")
    if forced:
        n = _env_int("GPUJOB_RANGE_CHANNELS", 1)
    elif rtt is None:
        n = 4
    else:
        n = min(MAX_CHANNELS, math.ceil(RATE * rtt / SSHD_WINDOW))
    return max(1, min(n, nranges))


def ranged(agent: Agent, items: list[Any]) -> list[Any]:
    """The items to send in ranges: large files with no single-stream part file to resume,
    over a link where more than one channel pays."""
    if agent.endpoint.is_local:
        return []
    least = _env_int("GPUJOB_RANGE_MIN", RANGE_MIN)
    big = [e for e in items if not e.is_dir and e.link is None and not e.prefix and e.size >= least]
    if not big:
        return []
    span = _env_int("GPUJOB_RANGE_SPAN", SPAN)
    rtt = measured_rtt(agent)
    return [e for e in big if channels_for(rtt, ranges.layout(e.size, span)) > 1]


class _Answers:
    """A served channel's answer lines as a ``range`` command's stdout reads; its last line,
    ``{"exit": N}``, is held back as the exit status."""

    def __init__(self, rfile: IO[bytes], host: str) -> None:
        self.rfile, self.host = rfile, host
        self.rc: int | None = None
        self.ended = False
        self.left = ANSWERS_MAX  # what the honest server says is a few short lines

    def readline(self, limit: int = -1) -> bytes:
        if self.ended:
            return b""
        try:
            line = self.rfile.readline(self.left + 1)
        except socket.timeout:
            raise
        except (OSError, ValueError, EOFError):  # cut, or dropped by kill()
            line = b""
        self.left -= len(line)
        if self.left < 0:
            self.ended = True
            raise replies.too_large(self.host, ANSWERS_MAX)
        if line.startswith(b'{"exit": '):
            doc = replies.parse("range", self.host, line.decode("utf-8", "replace"))
            if not doc or not isinstance(doc.get("exit"), int):
                raise replies.unreadable(self.host, f"an exit line {line[:80]!r} from its range server")
            self.rc = doc["exit"]
            line = b""
        self.ended = not line
        return line

    def read(self, n: int = -1) -> bytes:
        return b"".join(iter(self.readline, b""))


class _Served(Stream):
    """One channel over a connection to the sync's ``range_serve`` process."""

    def __init__(self, tunnel: Tunnel, host: str) -> None:
        self.tunnel = tunnel
        self.stdin = tunnel.wfile
        self.answers = _Answers(tunnel.rfile, host)
        self.stdout = self.answers  # type: ignore[assignment]

    def close_stdin(self) -> None:
        self.tunnel.close_write()

    def wait(self, timeout: float | None = None) -> int:
        """The exit line (after any answer not read yet); -1 when the stream ended without it."""
        self.tunnel.settimeout(timeout)
        try:
            while self.answers.readline():
                pass
        except socket.timeout:
            raise TimeoutError("the range channel did not finish") from None
        return self.answers.rc if self.answers.rc is not None else -1

    def stderr_text(self) -> str:
        return ""  # the server writes errors on the stream, as a command writes them on stdout

    def kill(self) -> None:
        self.tunnel.close()


class _Box(TypedDict, total=False):
    """The started command and the dial request, each once known (``_Server.start``)."""

    s: Stream
    line: bytes


class _Server:
    """The sync's one ``range_serve`` process, started on first use; ``connect`` gives a
    channel to it, or None once the host refused a TCP channel (the caller runs a ``range``
    command instead)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.lock = threading.Lock()
        self.s: Stream | None = None
        self.doc: dict[str, Any] = {}
        self.files: list[list[Any]] = []  # [name, size, span] of the files coming: the first line says what is held
        self.error: BaseException | None = None
        self.refused = os.environ.get("GPUJOB_RANGE_SERVE", "1") == "0"
        self.back: Any = None  # the port forwarded back, once asked for (gpujob/transport/dialback.py)
        self.asking = threading.Event()  # set once the forward was asked for (granted or not)
        self.dialled = 0  # channels taken that the server dialled back

    def start(self, dial: bool = False) -> None:
        """Start the process (once); its failure is raised to the channels that connect.
        ``dial``: ask sshd for a forwarded port beside the exec, and the server to dial back the
        channels ``files`` will use (each open a round trip sooner than one opened from here)."""
        with self.lock:
            if self.s is None and not self.refused and self.error is None:
                box: _Box = {}
                lock = threading.Lock()

                def ready(s: Stream) -> None:  # the command is on its way: the dial request follows it
                    with lock:
                        box["s"] = s
                        _tell(s, box.get("line"))

                if dial and os.environ.get("GPUJOB_RANGE_DIAL", "1") != "0":
                    threading.Thread(target=self._dial, args=(box, lock), name="gpujob-range-dial", daemon=True).start()
                else:
                    self.asking.set()
                try:
                    files = ["--files", json.dumps(self.files[:50])] if self.files else []
                    self.s, self.doc = self.agent.stream_doc("range_serve", files, again=AGAIN, before=ready)
                except BaseException as e:  # noqa: BLE001 - raised in each channel's thread
                    self.error = e
                    return
                threading.Thread(target=self._said, args=(self.s,), name="gpujob-range-said", daemon=True).start()

    def _said(self, s: Stream) -> None:
        """The server's lines after its first (where the channels it dialled come from), until
        it ends or has said ``ANSWERS_MAX`` bytes."""
        left = ANSWERS_MAX
        try:
            while left > 0:
                line = s.stdout.readline(min(left, 1 << 16))
                if not line:
                    return
                left -= len(line)
                doc = replies.parse("range_serve dialled", self.agent.endpoint.name, line.decode("utf-8", "replace"))
                if isinstance(doc, dict) and "dialled" in doc:
                    self.asking.wait()
                    if self.back is not None:
                        self.back.dialled(doc["dialled"])
        except (OSError, ValueError, EOFError, GpujobError):
            return

    def _dial(self, box: _Box, lock: threading.Lock) -> None:
        """Ask for the forwarded port; then the server (once its command is started: again if
        it is started again after an install) for the channels the files will use."""
        from gpujob.transport.dialback import DialBack  # paramiko's: imported where a large upload needs it

        try:
            self.back = DialBack.open(self.agent.t)
        finally:
            self.asking.set()
        if self.back is None:
            return
        rtt = measured_rtt(self.agent)
        n = sum(c for c in (channels_for(rtt, ranges.layout(size, span)) for _, size, span in self.files) if c > 1)
        if n < 1:
            return
        with lock:
            box["line"] = (json.dumps(self.back.ask(min(n, rangeserve.DIAL_MAX))) + "\n").encode()
            _tell(box.get("s"), box["line"])

    def connect(self, t: Transport, head: Mapping[str, object]) -> Stream | None:
        self.start()
        if self.error is not None:
            raise self.error
        if self.refused:
            return None
        back = self.back.take(DIAL_WAIT) if self.back is not None else None
        if back is not None:  # dialled by the server (known by its origin): the header goes first
            with self.lock:
                self.dialled += 1
            back.wfile.write(f"{json.dumps(head)}\n".encode())
            back.wfile.flush()
            return _Served(back, self.agent.endpoint.name)
        try:
            tunnel = t.connect(int(self.doc["port"]))
        except TunnelRefused:
            self.refused = True
            return None
        tunnel.wfile.write(f"{self.doc['token']}\n{json.dumps(head)}\n".encode())
        tunnel.wfile.flush()
        return _Served(tunnel, self.agent.endpoint.name)

    def close(self) -> None:
        """End the process (its stdin's EOF); every channel is done by now, so its exit is
        waited for in a thread (a round trip the sync need not wait: the commit answered)."""
        with self.lock:
            s, self.s = self.s, None
        if self.back is not None:
            self.back.close()
        if s is None:
            return
        s.close_stdin()
        threading.Thread(target=_reap, args=(s,), name="gpujob-range-serve-end", daemon=True).start()


def _tell(s: Stream | None, line: bytes | None) -> None:
    """Write a control line to the range server's stdin (both known; a dead one is let be)."""
    if s is not None and line is not None:
        try:
            s.stdin.write(line)
            s.stdin.flush()
        except (OSError, EOFError):
            pass


def _reap(s: Stream) -> None:
    try:
        s.wait(30)
    except TimeoutError:
        pass
    s.kill()


class _Channel:
    """One channel carrying some of a file's ranges (a connection to the sync's range server,
    else a ``range`` command); run in a thread of its own."""

    def __init__(self, agent: Agent, item: Any, span: int, ks: list[int], args: list[str],
                 on_bytes: Callable[[int], None], server: _Server | None = None) -> None:
        self.agent, self.item, self.span, self.ks = agent, item, span, ks
        self.args = ["--name", item.arcname, "--size", str(item.size), "--span", str(span),
                     "--ranges", ",".join(map(str, ks)), *args]
        self.head = {"name": item.arcname, "size": item.size, "span": span, "ranges": ",".join(map(str, ks)),
                     **{a[2:]: v for a, v in zip(args[::2], args[1::2])}}
        self.server = server
        self.on_bytes = on_bytes
        self.s: Any = None
        self.hashes: dict[int, list[str]] = {}
        self.sent = 0
        self.error: BaseException | None = None
        self.own = False
        self.root = agent.root
        self.opened: Agent | None = None
        self.have: dict[str, list[str]] = {}
        self.unread = False  # the channel's own first line (what it holds) is still to be read
        self.opening: threading.Thread | None = None
        self.written = threading.Event()  # everything sent (or failed): the hashes are known

    def open(self) -> None:
        """Start the command and read what it holds of its ranges."""
        try:
            if self.own:  # a connection of its own (measured against channels sharing one: BENCHMARKS.md)
                from gpujob.transport.ssh import SSHTransport

                self.agent = Agent(SSHTransport(self.agent.host), self.agent.host)
                self.agent.root = self.root
                self.opened = self.agent
            served = self.server.connect(self.agent.t, self.head) if self.server is not None else None
            known = self.server.doc.get("have", {}).get(self.item.arcname) if served is not None and self.server is not None else None
            if served is not None and known is not None:  # the server's first line said: no round trip to ask
                self.s, self.unread = served, True
                doc = {"have": {str(k): known.get(str(k), []) for k in self.ks}}
            elif served is not None:
                self.s, doc = served, _first_doc(self.agent, served)
            else:
                self.s, doc = self.agent.stream_doc("range", self.args, again=AGAIN)
            self.have = doc.get("have", {})
        except BaseException as e:  # noqa: BLE001 - handed to the thread that started this one
            self.error = e

    def run(self) -> None:
        try:
            self._run()
        finally:  # however it ended (a channel that never opened too): the caller waits on this
            self.written.set()

    def _run(self) -> None:
        if self.opening is not None:
            self.opening.join()
        if self.s is None and self.error is None:
            self.open()
        if self.error is not None:
            return
        try:
            have = self.have
            out = self.s.stdin
            out.write(ranges.RMAGIC)
            with open(self.item.path, "rb") as f:
                for k in self.ks:
                    self._range(f.fileno(), out, k, have.get(str(k), []))
            out.write(stream.frame(b"E", {}))
            out.flush()
            self.written.set()
            line = self._answer()
            if b'"done"' not in line:
                self._failed(line)
        except (OSError, EOFError) as e:  # the server may have refused the channel before reading it
            line = self._answer() if self.unread else b""
            self.error = e
            if b'"error"' in line:
                try:
                    self._failed(line)
                except GpujobError as refused:
                    self.error = refused
        except BaseException as e:  # noqa: BLE001 - handed to the thread that started this one
            self.error = e

    def _answer(self) -> bytes:
        """The channel's next answer line, past its first (what it holds) if that is still unread."""
        line = self.s.stdout.readline(ANSWERS_MAX + 1)
        if self.unread:
            self.unread = False
            if b'"have"' in line:
                line = self.s.stdout.readline(ANSWERS_MAX + 1)
        if len(line) > ANSWERS_MAX:
            raise replies.too_large(self.agent.endpoint.name, ANSWERS_MAX)
        return line

    def _range(self, fd: int, out: Any, k: int, remote: list[str]) -> None:
        """Range ``k``: its chunks the instance holds are checked here, the rest sent."""
        size, first = self.item.size, k * self.span
        n = ranges.range_chunks(size, self.span, k)
        mine: list[str] = []
        sending = False
        for j in range(n):
            pos = (first + j) * stream.CHUNK
            data = os.pread(fd, min(stream.CHUNK, size - pos), pos)
            h = hashlib.sha256(data).hexdigest()
            if not sending and j < len(remote) and remote[j] == h:
                mine.append(h)  # there already
                continue
            if not sending:
                out.write(stream.frame(b"R", {"k": k, "off": j}))
                sending = True
            out.write(stream.frame(b"C", {"h": h}))
            out.write(data)
            mine.append(h)
            self.sent += len(data)
            self.on_bytes(len(data))
        self.hashes[k] = mine

    def _failed(self, line: bytes) -> None:
        self.s.close_stdin()
        rc = self.s.wait(60)
        if rc < 0:
            raise link_cut(self.agent.host, "upload", rc, AGAIN)
        raise RemoteError(f"upload of {self.item.arcname} to {self.agent.host.name} failed (exit {rc}): "
                          f"{(line.decode('utf-8', 'replace') or self.s.stderr_text()).strip()[-1000:]}", AGAIN)


AGAIN = "run submit again: finished files are skipped and a large file resumes at its last verified chunks"


def _first_doc(agent: Agent, s: Stream) -> dict[str, Any]:
    """A served channel's first line, read as ``Agent.stream_doc`` reads a command's."""
    try:
        line = s.stdout.readline(ANSWERS_MAX + 1)
    except replies.UnreadableReply:
        s.kill()  # a flood goes on otherwise
        raise
    if line:
        doc = replies.parse("range", agent.endpoint.name, line.decode("utf-8", "replace"))
        if doc is None:
            s.kill()
            raise replies.unreadable(agent.endpoint.name, f"no JSON in its range server's first line {line[:80]!r}")
        if "error" not in doc:
            return doc
        s.kill()
        raise RemoteError(doc["error"], doc.get("remedy", ""))
    rc = s.wait(60)
    s.kill()
    if rc < 0:
        raise link_cut(agent.host, "upload", rc, AGAIN)
    raise RemoteError(f"the range server on {agent.host.name} did not answer (exit {rc})", AGAIN)


def _channels(agent: Agent, it: Any, span: int, rtt: float | None, args: list[str],
              server: _Server | None) -> list[_Channel]:
    nr = ranges.layout(it.size, span)
    nch = channels_for(rtt, nr)
    chans = [_Channel(agent, it, span, list(range(c, nr, nch)), args, lambda n: None, server) for c in range(nch)]
    if os.environ.get("GPUJOB_RANGE_CONNECTIONS") == "own":
        for c in chans[1:]:
            c.own = True
    return chans


class Preopened:
    """Range channels opened while the manifest is on its way, for the local files that will
    likely go in ranges (large, and changed since the record of what the host holds): the range
    server starts and the channels connect meanwhile. One not needed after all gets an empty
    stream and ends. Holds the sync's range server, ended by ``close``."""

    def __init__(self, agent: Agent, trees: list[Any], records: list[Any], args: list[str]) -> None:
        self.chans: dict[str, list[_Channel]] = {}
        self.server = _Server(agent)
        if agent.endpoint.is_local:
            return
        least = _env_int("GPUJOB_RANGE_MIN", RANGE_MIN)
        span = _env_int("GPUJOB_RANGE_SPAN", SPAN)
        items = [stream.Item(t.arc(rel), t.path(rel), st[0], st[1], st[4])
                 for t, rec in zip(trees, records) for rel, st in t.files.items()
                 if st[0] >= least and list(rec.files.get(rel, [])[:4]) != list(st[:4])]  # not as the host got it last
        self.server.files = [[it.arcname, it.size, span] for it in items]
        if any(channels_for(_login_rtt(agent), ranges.layout(it.size, span)) > 1 for it in items):
            # started during the round trip measured next (at 150 ms its exec is the longest wait before the
            # data); that round trip is the forward's request, when the server dials its channels back
            threading.Thread(target=self.server.start, args=(True,), name="gpujob-range-serve", daemon=True).start()
            self.server.asking.wait(agent.endpoint.connect_timeout)  # one global request at a time (paramiko)
        for it in items:
            chans = _channels(agent, it, span, measured_rtt(agent), args, self.server)
            if len(chans) >= 2:
                for c in chans:
                    c.opening = threading.Thread(target=c.open, name="gpujob-range-open", daemon=True)
                    c.opening.start()
                self.chans[it.arcname] = chans

    def take(self, it: Any) -> list[_Channel] | None:
        """The channels opened for ``it`` (None when there are none or it changed since)."""
        chans = self.chans.pop(it.arcname, None)
        if chans is None or chans[0].item.size != it.size:
            if chans:
                self._end(chans)
            return None
        for c in chans:
            c.item = it
        return chans

    def close(self) -> None:
        """End the channels no item took, then the range server."""
        for chans in self.chans.values():
            self._end(chans)
        self.chans.clear()
        self.server.close()

    @staticmethod
    def _end(chans: list[_Channel]) -> None:
        for c in chans:
            if c.opening is not None:
                c.opening.join()
            if c.s is not None:
                c.s.close_stdin()
        for c in chans:
            if c.s is not None:
                try:
                    c.s.wait(30)
                except TimeoutError:
                    c.s.kill()
            if c.opened is not None:
                c.opened.close()


def upload_ranged(agent: Agent, items: list[Any], args: list[str], on_bytes: Callable[[int], None],
                  on_hash: Callable[[Any, str], None], pre: Preopened | None = None) -> int:
    """Send each of ``items`` in ranges over several channels (those ``pre`` opened for it
    ahead); returns the bytes not sent because the instance held them already."""
    own = pre is None
    pre = pre or Preopened(agent, [], [], args)
    try:
        return _upload_ranged(agent, items, args, on_bytes, on_hash, pre)
    finally:
        if own:
            pre.close()


def _upload_ranged(agent: Agent, items: list[Any], args: list[str], on_bytes: Callable[[int], None],
                   on_hash: Callable[[Any, str], None], pre: Preopened) -> int:
    span = _env_int("GPUJOB_RANGE_SPAN", SPAN)
    rtt = measured_rtt(agent)
    lock = threading.Lock()

    def counted(n: int) -> None:
        with lock:
            on_bytes(n)

    skipped = 0
    for it in items:
        before = os.stat(it.path)
        if before.st_size != it.size:
            raise GpujobError(f"{it.path} changed while being sent", "run submit again once the file stopped changing")
        it.st, it.mtime = before, before.st_mtime_ns
        chans = pre.take(it)
        if chans is None:
            chans = _channels(agent, it, span, rtt, args, pre.server)
        for c in chans:
            c.on_bytes = counted
        nr = ranges.layout(it.size, span)
        threads = [threading.Thread(target=c.run, name=f"gpujob-range-{i}", daemon=True) for i, c in enumerate(chans)]
        try:
            for t in threads:
                t.start()
            for c in chans:
                c.written.wait()
            whole = ""
            if not any(c.error for c in chans):
                after = os.stat(it.path)
                if (after.st_size, after.st_mtime_ns, after.st_ctime_ns, after.st_ino) != \
                        (before.st_size, before.st_mtime_ns, before.st_ctime_ns, before.st_ino):
                    raise GpujobError(f"{it.path} changed while being sent", "run submit again once the file stopped changing")
                chunks = [h for k in range(nr) for c in chans for h in c.hashes.get(k, [])]
                whole = hashlib.sha256("".join(chunks).encode()).hexdigest()
                _verify(agent, chans[0], it, whole)  # before the last chunks arrive: a round trip saved
            for t in threads:
                t.join()
            failed = [c.error for c in chans if c.error is not None]
            if failed:
                raise _as_error(agent, failed)
            _commit(agent, chans, it)
        finally:
            for c in chans:
                if c.s is not None:
                    c.s.kill()
                if c.opened is not None:
                    c.opened.close()
        skipped += it.size - sum(c.sent for c in chans)
        on_hash(it, whole)
    return skipped


COMMIT_WAIT = 120  # seconds the committing command waits for the other channels' chunks to keep coming


def _verify(agent: Agent, first: _Channel, it: Any, whole: str) -> None:
    """The verify record on the first channel: its command commits once every range is in."""
    try:
        first.s.stdin.write(stream.frame(b"V", {"h": whole, "mode": it.mode & 0o7777, "mtime": it.mtime,
                                                "wait": COMMIT_WAIT}))
        first.s.stdin.flush()
    except (OSError, EOFError) as e:
        first.error = first.error or e


def _commit(agent: Agent, chans: list[_Channel], it: Any) -> None:
    """The others end; the first channel's command answers whether it checked and renamed."""
    first, rest = chans[0], chans[1:]
    try:
        for c in rest:
            c.s.close_stdin()
        first.s.close_stdin()
        out = first.s.stdout.read()
        rc = first.s.wait()
    except (OSError, EOFError) as e:
        raise ConnectError(f"the connection to {agent.host.name} dropped during the upload ({e or type(e).__name__})",
                           AGAIN) from None
    if rc < 0:
        raise link_cut(agent.host, "upload", rc, AGAIN)
    if rc != 0 or b'"committed": true' not in out:
        raise RemoteError(f"upload of {it.arcname} to {agent.host.name} failed (exit {rc}): "
                          f"{(out.decode('utf-8', 'replace') or first.s.stderr_text()).strip()[-1000:]}", AGAIN)
    for c in rest:
        c.s.wait(60)


def _as_error(agent: Agent, failed: list[BaseException]) -> BaseException:
    """The error to report for failed channels: the instance's refusal over a dropped link."""
    for e in failed:
        if isinstance(e, GpujobError):
            return e
    e = failed[0]
    if isinstance(e, (OSError, EOFError)):
        return ConnectError(f"the connection to {agent.host.name} dropped during the upload ({e or type(e).__name__})",
                            AGAIN)
    return e
