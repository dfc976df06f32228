"""``SSHTransport``: paramiko, one connection per transport, host keys checked (trust on first use).

Reads only the ``Endpoint`` it is given: the key files and known_hosts are named there."""

from __future__ import annotations

import logging
import os
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# isort: off
import gpujob.transport.paramiko_load  # noqa: F401  (first: paramiko without invoke and importlib.metadata)
import paramiko
# isort: on

from gpujob.backoff import backoff
from gpujob.bundle import import_remote
from gpujob.errors import ConnectError, HostError, HostKeyChanged
from gpujob.transport import login, replies
from gpujob.transport.base import (
    STDERR_KEPT,
    Forward,
    PumpedStream,
    Result,
    Stream,
    Transport,
    Tunnel,
    TunnelRefused,
)
from gpujob.transport.chanbuf import ChannelReader, open_session
from gpujob.transport.endpoint import Endpoint, Target, as_endpoint, identity_problem
from gpujob.transport.pipelined_auth import PipelinedTransport
from gpujob.transport.readahead import ReadAheadPacketizer

# paramiko's transport thread logs the traceback of a failed handshake (no banner over a dead
# link); with no handler Python prints it on stderr. The error reaches the user as one message.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
WINDOW_MIN, WINDOW_MAX = 2 << 20, 32 << 20  # each channel's receive window (see size_window)
WINDOW_RATE = 125e6  # bytes/s the window is sized to sustain (1 Gbit)


def _client_key(ep: Endpoint) -> paramiko.PKey:
    """gpujob's own key, which the configuration layer makes before the first connect."""
    try:
        return paramiko.Ed25519Key.from_private_key_file(ep.client_key)
    except (OSError, paramiko.SSHException) as e:
        raise ConnectError(f"cannot read gpujob's key {ep.client_key or '(none given)'}: {e}",
                           "run the command again (gpujob makes its key when it is missing)") from None


def _host_id(ep: Endpoint) -> str:
    return ep.hostname if ep.port == 22 else f"[{ep.hostname}]:{ep.port}"


def _known_hosts_text(keys: paramiko.HostKeys, beside: Path) -> bytes:
    """The file paramiko writes for ``keys`` (its own format, entries kept as loaded)."""
    tmp = import_remote("core.atomicfile").temp_name(beside)
    try:
        keys.save(str(tmp))
        return tmp.read_bytes()
    finally:
        tmp.unlink(missing_ok=True)


def _change_known_hosts(path: Path, edit: Callable[[paramiko.HostKeys], None]) -> None:
    """Read known_hosts, ``edit`` it and write it back under its lock (remote/core/atomicfile.py): two
    first connections at once each keep the key they recorded."""
    atomicfile = import_remote("core.atomicfile")
    with atomicfile.locked(path):
        keys = paramiko.HostKeys()
        if path.exists():
            keys.load(str(path))
        edit(keys)
        atomicfile.write(path, _known_hosts_text(keys, path), 0o600)


class _TrustOnFirstUse(paramiko.MissingHostKeyPolicy):
    """Record an unknown host's key; a changed key never reaches here (paramiko raises BadHostKey)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        def record(keys: paramiko.HostKeys) -> None:
            known = keys.lookup(hostname)
            had = known.get(key.get_name()) if known is not None else None
            if had is not None and had != key:  # another process recorded a different key meanwhile
                raise paramiko.BadHostKeyException(hostname, key, had)
            keys.add(hostname, key.get_name(), key)

        _change_known_hosts(self.path, record)


def recorded_keys(known_hosts: str | Path, hostname: str, port: int) -> set[str]:
    """The host keys recorded for ``hostname:port`` (base64), none when it was never reached."""
    path = Path(known_hosts)
    if not path.exists():
        return set()
    found = paramiko.HostKeys(str(path)).lookup(hostname if port == 22 else f"[{hostname}]:{port}")
    return {k.get_base64() for k in (found or {}).values()}


def forget_host_key(target: Target) -> bool:
    """Drop the recorded key of ``target`` (``gpujob host trust``); True if one was there."""
    ep = as_endpoint(target)
    path = Path(ep.known_hosts)
    if not path.exists():
        return False
    hid = _host_id(ep)
    found = []

    def drop(keys: paramiko.HostKeys) -> None:
        if hid in keys:
            found.append(hid)
            del keys[hid]

    _change_known_hosts(path, drop)
    return bool(found)


def open_client(target: Target, password: str | None = None, retries: int | None = None,
                only_key: bool = False) -> paramiko.SSHClient:
    """Connect and authenticate, retrying refused or timed-out connects with backoff. ``only_key``: with
    the endpoint's key alone, never an ssh-agent's (``host rekey`` proves what a key opens)."""
    host = as_endpoint(target)
    if retries is None:
        retries = int(os.environ.get("GPUJOB_CONNECT_RETRIES", "3"))
    client = paramiko.SSHClient()
    kh = Path(host.known_hosts)
    if kh.exists():
        client.load_host_keys(str(kh))
    client.set_missing_host_key_policy(_TrustOnFirstUse(kh))
    pkey = None
    why = identity_problem(host.identity_file) if host.identity_file else ""
    if why:  # a wrong path is no silent instance: say so before connecting
        raise HostError(f"{host.name}: {why}",
                        f"give the private key's path: gpujob host set {host.name} --identity ~/.ssh/KEY")
    # the profile's key loaded by its own type (paramiko's loop over key classes raised "Invalid key"
    # over an RSA key's refusal); None: a passphrase protects it, an ssh-agent may hold it
    pkey = login.load_identity(os.path.expanduser(host.identity_file)) if host.identity_file else _client_key(host)
    locked = pkey is None
    agent = password is None and not only_key and not os.environ.get("GPUJOB_NO_SSH_AGENT")
    if locked and not agent:  # nothing could open this login: say so before connecting
        raise login.locked_key(host)
    for attempt in range(1, retries + 1):
        try:
            client.connect(
                host.hostname, port=host.port, username=host.user, password=password, pkey=pkey,
                timeout=host.connect_timeout, banner_timeout=host.connect_timeout,
                auth_timeout=host.connect_timeout, look_for_keys=False, transport_factory=gcm_first,
                allow_agent=agent,
            )
            tr = client.get_transport()
            assert tr is not None
            tr.set_keepalive(15)
            # paramiko starts its own re-key after 512 MB and can livelock when a channel closes
            # during it (paramiko#822); OpenSSH servers re-key on their own schedule instead
            tr.packetizer.REKEY_BYTES = tr.packetizer.REKEY_PACKETS = 1 << 40
            size_window(tr)
            return client
        except paramiko.BadHostKeyException as e:
            raise HostKeyChanged(
                f"the host key of {host.name} ({_host_id(host)}) has CHANGED: recorded {e.expected_key.get_name()} "
                f"{e.expected_key.get_fingerprint().hex()[:16]}…, offered {e.key.get_fingerprint().hex()[:16]}…. "
                "This happens after an image change or a re-created instance — or an attack",
                f"if you changed the instance, accept the new key with: gpujob host trust {host.name}",
            ) from None
        except login.SecondFactorAsked as e:  # the host answered: its policy, no retry helps
            client.close()
            raise login.second_factor(host, e.methods, pkey, password is not None) from None
        except paramiko.AuthenticationException as e:
            methods = None if "timeout" in str(e).lower() else login.offered(client, host.user)
            client.close()
            if "timeout" in str(e).lower():  # paramiko's "Authentication timeout.": the link froze, no refusal
                if attempt < retries:
                    time.sleep(backoff(attempt, 1.0, 30.0))
                    continue
                raise _no_answer(host, "did not answer during the login (it timed out)", retries) from None
            if password is not None:  # the key is refused until the password installs it: the password's verdict
                raise login.password_refused(host, methods) from None
            raise login.refused(host, e, pkey, locked, methods, login.agent_key_count() if agent else 0) from None
        except socket.gaierror:
            client.close()
            raise login.NotReached(
                f"cannot resolve the host name {host.hostname!r}",
                f"check the name in the console's login line; update it with gpujob host set {host.name} --ssh \"...\"",
            ) from None
        except (ConnectionRefusedError, socket.timeout, TimeoutError, OSError, paramiko.SSHException) as e:
            client.close()
            policy = login.incompatible(host, e)
            if policy is not None:  # no algorithm in common: the host answered, retrying changes nothing
                raise policy from None
            if locked and "No authentication methods available" in str(e):  # the agent held no key
                raise login.locked_key(host) from None
            kind = (
                "refused the connection"
                if isinstance(e, (ConnectionRefusedError, paramiko.ssh_exception.NoValidConnectionsError))
                else "did not answer" if isinstance(e, (socket.timeout, TimeoutError))
                or "No existing session" in str(e) or "banner" in str(e)  # a link that carries nothing
                else f"failed: {e}"
            )
            if attempt < retries:
                time.sleep(backoff(attempt, 1.0, 30.0))
                continue
            raise _no_answer(host, kind, retries) from None
    raise AssertionError("unreachable")


def _no_answer(host: Endpoint, kind: str, retries: int) -> ConnectError:
    return login.NotReached(
        f"{host.address} {kind} (after {retries} tries)",
        "is the instance powered on? Its port can change after a restart: copy the login line again and run "
        f"gpujob host set {host.name} --ssh \"ssh -p PORT root@HOST\"",
    )


class _QuietFinal:
    """A channel file whose finalizer never prints: collected at exit in a reference cycle (a stored
    error's traceback), its buffer can be finalized first and paramiko's flush then raised a trace
    under the command's clear error."""

    # bound now: at exit, module globals (sys, paramiko) are already None when a finalizer runs
    _QUIET = (ValueError, OSError, EOFError, paramiko.SSHException)

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        if _finalizing():
            # at exit a daemon thread (the stderr pump, still draining a flood) can be frozen holding
            # the channel's lock, and close() would wait on it forever; the process's end closes the socket
            return
        try:
            self.close()  # type: ignore[attr-defined]
        except self._QUIET:
            pass


class _Stdin(_QuietFinal, paramiko.channel.ChannelStdinFile):
    pass


class _File(_QuietFinal, paramiko.channel.ChannelFile):
    pass


class _SSHStream(PumpedStream):
    """A channel's stdout read in the reading thread itself (``ChannelReader``: no pump thread, no
    pipe: a download's every byte was copied through both), its stderr pumped into the buffer;
    the exit status comes on the channel."""

    def __init__(self, chan: paramiko.Channel) -> None:
        self.chan = chan
        super().__init__(_Stdin(chan, "wb"), ChannelReader(chan.recv), chan.recv_stderr)  # type: ignore[arg-type]

    def close_stdin(self) -> None:
        try:
            self.stdin.flush()
            self.chan.shutdown_write()
        except (OSError, EOFError):
            pass

    def _exit_status(self, timeout: float | None) -> int:
        if timeout is not None:
            deadline = time.monotonic() + timeout
            while not self.chan.exit_status_ready():
                if time.monotonic() > deadline:
                    raise TimeoutError("remote command did not finish")
                time.sleep(0.05)
        return self.chan.recv_exit_status()

    def kill(self) -> None:
        try:  # on a cut link paramiko's close raises EOFError: abandoning must not hide the cause
            self.chan.close()
        except (EOFError, OSError, paramiko.SSHException):
            pass
        self.stdout.close()


class _SSHForward(Forward):
    def __init__(self, transport: paramiko.Transport, local_port: int, remote_host: str, remote_port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", local_port))
        self.sock.listen(16)
        self.local_port = self.sock.getsockname()[1]
        self.transport, self.target = transport, (remote_host, remote_port)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._pump, args=(conn, addr), daemon=True).start()

    def _pump(self, conn: socket.socket, addr: tuple) -> None:
        try:
            chan = self.transport.open_channel("direct-tcpip", self.target, addr)
        except (paramiko.SSHException, OSError):
            conn.close()
            return
        try:
            while not self._closed:
                ends: list[socket.socket | paramiko.Channel] = [conn, chan]
                r, _, _ = select.select(ends, [], [], 1.0)
                if conn in r:
                    data = conn.recv(65536)
                    if not data:
                        break
                    chan.sendall(data)
                if chan in r:
                    data = chan.recv(65536)
                    if not data:
                        break
                    conn.sendall(data)
        except OSError:
            pass
        finally:
            chan.close()
            conn.close()

    def close(self) -> None:
        self._closed = True
        self.sock.close()


class ChannelTunnel(Tunnel):
    """A ``direct-tcpip`` channel read and written as files (no copy through a pipe)."""

    def __init__(self, chan: paramiko.Channel) -> None:
        self.chan = chan
        # (a ChannelFile is a file, read, readline, write, flush, that paramiko's stub does not declare an IO)
        self.rfile, self.wfile = _File(chan, "rb"), _File(chan, "wb")  # type: ignore[assignment]

    def close_write(self) -> None:
        try:
            self.wfile.flush()
            self.chan.shutdown_write()
        except (OSError, EOFError):
            pass

    def settimeout(self, seconds: float | None) -> None:
        self.chan.settimeout(seconds)

    def close(self) -> None:
        try:
            self.chan.close()
        except (EOFError, OSError, paramiko.SSHException):
            pass


def open_tunnel(tr: paramiko.Transport, host: str, port: int, timeout: float) -> paramiko.Channel:
    """A ``direct-tcpip`` channel to ``host:port``; ``TunnelRefused`` when sshd refuses it
    (``AllowTcpForwarding no``: administratively prohibited; nothing listening: connect failed)."""
    try:
        return tr.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=timeout)
    except paramiko.ChannelException as e:
        raise TunnelRefused(f"the host refused a TCP channel to {host}:{port} ({e.text})") from None
    except paramiko.SSHException as e:
        # paramiko keeps one refusal per transport: of several opens refused at once, the others
        # get a bare "Unable to open channel." while the connection stays up
        if tr.is_active() and "Unable to open channel" in str(e):
            raise TunnelRefused(f"the host refused a TCP channel to {host}:{port}") from None
        raise


AEAD = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


class _QuickAck:
    """The connection's socket, acknowledging what it receives at once (Linux ``TCP_QUICKACK``).

    OpenSSH's sshd leaves Nagle on for a session without a terminal, so a reply written in two
    segments waits for our acknowledgement of the first, which Linux delays by up to 40 ms once the
    exchange looks interactive: the first channel's open confirmation waited 42-50 ms behind the
    host-key notice sshd sends after the login, every first command (BENCHMARKS.md, issue 38).
    The kernel clears the flag when we send soon after a receive, so the first receive after a send
    sets it again; receives in a row (a download) and sends in a row (an upload) cost no call."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._sent = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def send(self, data: bytes, *flags: int) -> int:
        self._sent = True
        return self._sock.send(data, *flags)

    def sendall(self, data: bytes, *flags: int) -> None:
        self._sent = True
        self._sock.sendall(data, *flags)

    def recv(self, n: int, *flags: int) -> bytes:
        data = self._sock.recv(n, *flags)
        self._rearm()
        return data

    def recv_into(self, buf: Any, n: int = 0, *flags: int) -> int:
        got = self._sock.recv_into(buf, n, *flags)
        self._rearm()
        return got

    def _rearm(self) -> None:
        if self._sent:
            self._sent = False
            try:
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
            except OSError:
                pass


def gcm_first(sock: Any, **kw: Any) -> paramiko.Transport:
    """paramiko's transport preferring AES-GCM (OpenSSH has it since 6.2): one AEAD call per
    32 KB packet instead of AES-CTR plus an HMAC-SHA256, which was most of the CPU a loopback
    upload spent in paramiko (BENCHMARKS.md); TCP_NODELAY, as OpenSSH sets it; and quick
    acknowledgements (``_QuickAck``); a key login one round trip shorter (``pipelined_auth``)."""
    try:  # paramiko writes each message at once: Nagle would hold a small request for the peer's delayed ACK
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (OSError, AttributeError):
        pass
    if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6) \
            and hasattr(socket, "TCP_QUICKACK") \
            and os.environ.get("GPUJOB_QUICKACK", "1") != "0":
        sock = _QuickAck(sock)
    tr = PipelinedTransport(sock, packetizer_class=ReadAheadPacketizer, **kw)  # many packets a recv
    opts = tr.get_security_options()
    if os.environ.get("GPUJOB_SSH_GCM", "1") != "0":
        opts.ciphers = tuple(c for c in AEAD if c in opts.ciphers) + tuple(c for c in opts.ciphers if c not in AEAD)
    return tr


def size_window(tr: paramiko.Transport) -> None:
    """Size the receive window of this connection's channels from one measured round trip,
    without waiting for it (the first command's channel opens meanwhile, with the smallest).

    What the server may send before we acknowledge: paramiko's 2 MB caps a download at 2 MB per
    round trip (13 MB/s at 150 ms, whatever the link). The window is RTT × 1 Gbit, at least
    2 MB: a larger one on a short link only costs (paramiko's channel buffer copies what it
    holds on every read: a 16 MB window halved a loopback download). A transfer opens its
    channel after at least one command, by when the answer is in."""
    tr.default_window_size = WINDOW_MIN
    threading.Thread(target=probe_rtt, args=(tr,), name="gpujob-rtt-window", daemon=True).start()


def probe_rtt(tr: paramiko.Transport, timeout: float = 5.0) -> float | None:
    """One round trip (an SSH global request), or None without an answer within ``timeout``;
    the least one measured on ``tr`` is kept as ``tr.gpujob_rtt`` (gpujob/usecases/sync/ranges.py sizes a
    large upload's channels from it: the first, right after the login, can wait for a delayed ACK)
    and sizes the channels' receive window (``size_window``).

    paramiko waits for the reply for as long as the transport looks alive, which a link that died
    silently does for minutes: the probe runs in a thread of its own, and no answer within
    ``timeout`` gives None (the first command then meets the dead link as usual)."""
    rtts: list[float] = []

    def probe() -> None:
        t = time.monotonic()
        try:
            tr.global_request("keepalive@openssh.com", wait=True)  # any reply is one round trip
        except (paramiko.SSHException, EOFError, OSError):
            return
        rtt = time.monotonic() - t
        rtts.append(rtt)
        least = min(rtt, getattr(tr, "gpujob_rtt", rtt))
        tr.gpujob_rtt = least  # type: ignore[attr-defined]
        tr.default_window_size = int(min(WINDOW_MAX, max(WINDOW_MIN, least * WINDOW_RATE)))
        threading.Thread(target=grow_windows, args=(tr, tr.default_window_size, timeout), name="gpujob-window",
                         daemon=True).start()

    th = threading.Thread(target=probe, name="gpujob-rtt", daemon=True)
    th.start()
    th.join(timeout)
    return rtts[0] if rtts else None


def grow_windows(tr: paramiko.Transport, size: int, timeout: float) -> None:
    """Grant the channels opened before the round trip was known (a first command that is a
    download: its channel opens at once) the rest of ``size`` with one window adjust each, as
    paramiko grants what was read; one still opening gets it once its open is confirmed."""
    for chan in tr._channels.values():  # type: ignore[attr-defined]  # private: not in paramiko's stub (pyproject pins the paramiko tested)
        if not chan.active:
            chan.event.wait(timeout)
        with chan.lock:
            extra = size - chan.in_window_size
            if extra <= 0 or chan.closed or not chan.active or chan.eof_received:
                continue
            chan.in_window_size, chan.in_window_threshold = size, size // 10
        m = paramiko.Message()
        m.add_byte(paramiko.common.cMSG_CHANNEL_WINDOW_ADJUST)
        m.add_int(chan.remote_chanid)
        m.add_int(extra)
        try:
            tr._send_user_message(m)  # type: ignore[attr-defined]  # private: not in paramiko's stub (pyproject pins the paramiko tested)
        except (OSError, EOFError, paramiko.SSHException):
            return


# while a command runs, seconds with no packet from the server before a probe asks whether the
# link still carries any (a frozen link otherwise held a resume or a stop for its 600 s timeout)
LINK_QUIET = float(os.environ.get("GPUJOB_LINK_QUIET", "10"))


def received(tr: paramiko.Transport) -> tuple[Any, Any]:
    """paramiko's counters of what the server sent (they move on any packet, window adjustments
    of an upload included)."""
    p = tr.packetizer
    return getattr(p, "_Packetizer__received_bytes", None), getattr(p, "_Packetizer__received_packets", None)


def link_answers(tr: paramiko.Transport, timeout: float) -> bool:
    """Whether the server answers a keepalive request within ``timeout`` s (in a thread: paramiko
    waits for the reply as long as the transport looks alive, which a dead link does for minutes)."""
    done = threading.Event()
    answered: list[bool] = []

    def probe() -> None:
        try:
            tr.global_request("keepalive@openssh.com", wait=True)  # any answer will do
            answered.append(tr.is_active())
        except Exception:
            pass
        done.set()

    threading.Thread(target=probe, name="gpujob-link-probe", daemon=True).start()
    done.wait(timeout)
    return bool(answered and answered[0])


def probe_wait(endpoint: Endpoint) -> float:
    """How long a link probe waits for its answer: a few seconds, more on a slow-to-connect host."""
    return max(3.0, min(10.0, endpoint.connect_timeout / 3))


class SSHTransport(Transport):
    """A paramiko connection to ``host``; commands run through the login user's shell."""

    def __init__(self, target: Target, password: str | None = None, only_key: bool = False) -> None:
        super().__init__(target)
        self.client = open_client(self.endpoint, password=password, only_key=only_key)
        self._closing = threading.Event()
        threading.Thread(target=self._watch_link, name="gpujob-link-watch", daemon=True).start()

    def _watch_link(self) -> None:
        """While a channel is open and the server has sent nothing for ``LINK_QUIET`` s, probe the
        link; no answer: close the connection, so that every wait, read and write on it ends at once
        and the caller reports a cut link (a frozen link held a command, an upload or a pull for
        the command's timeout, or for ever). The kept connection's daemon does the same (muxd)."""
        tr = self.client.get_transport()
        if tr is None:
            return
        seen, since = received(tr), time.monotonic()
        while not self._closing.wait(1.0) and tr.is_active():
            now_seen = received(tr)
            busy = any(not c.closed for c in list(tr._channels.values()))  # type: ignore[attr-defined]  # private: not in paramiko's stub (pyproject pins the paramiko tested)
            if not busy or now_seen != seen:
                seen, since = now_seen, time.monotonic()
                continue
            if time.monotonic() - since < LINK_QUIET:
                continue
            if link_answers(tr, probe_wait(self.endpoint)):
                seen, since = received(tr), time.monotonic()
                continue
            if not self._closing.is_set():
                self.client.close()
            return

    @property
    def _transport(self) -> paramiko.Transport:
        tr = self.client.get_transport()
        if tr is None or not tr.is_active():
            raise ConnectError(f"the connection to {self.endpoint.address} dropped", "check the network and run the command again")
        return tr

    def _exec(self, cmd: str, wait: bool = True) -> paramiko.Channel:
        """A channel running ``cmd``; ``wait=False`` sends the request without waiting for its
        answer (a round trip: the command starts as soon as it arrives, and what is written to
        its stdin follows it). A refused request then closes the channel: its reader meets the
        end with no exit status, as with a cut link."""
        try:
            tr = self._transport
            chan = open_session(tr)
            if wait:
                chan.exec_command(cmd)
            else:
                m = paramiko.Message()
                m.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
                m.add_int(chan.remote_chanid)
                m.add_string("exec")
                m.add_boolean(True)  # an answer still comes: a refusal closes the channel (paramiko)
                m.add_string(cmd)
                chan._event_pending()  # type: ignore[attr-defined]  # private: not in paramiko's stub (pyproject pins the paramiko tested)
                tr._send_user_message(m)  # type: ignore[attr-defined]  # private: not in paramiko's stub (pyproject pins the paramiko tested)
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise ConnectError(f"the connection to {self.endpoint.address} dropped ({e})", "run the command again") from None
        return chan

    def run(self, cmd: str, input: bytes | None = None, timeout: float | None = None, limit: int | None = None) -> Result:
        chan = self._exec(cmd)
        try:
            if input:
                chan.sendall(input)
            chan.shutdown_write()
        except OSError:  # it ended before reading its input (an agent not installed yet says so at once): its answer says why
            pass
        out, err = bytearray(), bytearray()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            r, _, _ = select.select([chan], [], [], 1.0)
            got = False
            while chan.recv_ready():
                out += chan.recv(65536)
                got = True
                if limit is not None and len(out) > limit:  # a hostile or broken host: stop reading now
                    chan.close()
                    raise replies.too_large(self.endpoint.name, limit)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
                del err[:-STDERR_KEPT]  # the end says why; a flood is not kept
                got = True
            if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                break
            if not got and chan.closed:
                break
            if not got and chan.eof_received:  # the channel's pipe stays readable after EOF: wait, not spin
                chan.status_event.wait(1.0)
            if deadline and time.monotonic() > deadline:
                chan.close()
                raise ConnectError(f"{self.endpoint.address} did not answer a command within {timeout:.0f}s",
                                   "the instance may be overloaded or the link stalled: run the command again")
        rc = chan.recv_exit_status()
        chan.close()
        return Result(rc, bytes(out), bytes(err))

    def stream(self, cmd: str) -> Stream:
        return _SSHStream(self._exec(cmd, wait=False))  # its first line answers: no round trip before

    def connect(self, port: int, host: str = "127.0.0.1") -> Tunnel:
        try:
            return ChannelTunnel(open_tunnel(self._transport, host, port, self.endpoint.connect_timeout))
        except TunnelRefused:
            raise
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise ConnectError(f"the connection to {self.endpoint.address} dropped ({e})", "run the command again") from None

    def forward(self, remote_port: int, local_port: int = 0, remote_host: str = "127.0.0.1") -> Forward:
        return _SSHForward(self._transport, local_port, remote_host, remote_port)

    def close(self) -> None:
        self._closing.set()
        self.client.close()
