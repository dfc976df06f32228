"""One ``range_serve`` process per sync serving every range channel over SSH ``direct-tcpip``
channels (remote/stream/ranges.py ``serve``, gpujob/usecases/sync/ranges.py): the file arrives
verified and resumes after a cut, a connection without the token is dropped, the process ends
with its stdin (the laptop done, killed or cut off), and where sshd forbids TCP forwarding the
channels are ``range`` commands again. Small files: 4 MiB chunks, one per range."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpujob.config.hosts import HostStore
from gpujob.errors import GpujobError
from gpujob.transport import connect
from gpujob.usecases.sync.ranges import Preopened, ranges, stream, upload_ranged
from tests.conftest import job_processes_under
from tests.gpujob.usecases.test_sync import REPO, agent_for, linkemu
from tests.helpers import wait_for

CHUNK = stream.CHUNK


@pytest.fixture(autouse=True)
def small_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUJOB_RANGE_SPAN", "1")
    monkeypatch.setenv("GPUJOB_RANGE_CHANNELS", "3")


def servers(tmp_path: Path) -> set[int]:
    """The ``range_serve`` processes of this test (its root is on their command line)."""
    from remote.core.procs import _cmdline

    return {p for p in job_processes_under(tmp_path) if b"range_serve" in _cmdline(p)}


def big_file(tmp_path: Path, size: int) -> tuple[stream.Item, bytes]:
    blob = os.urandom(size)
    path = tmp_path / "big.bin"
    path.write_bytes(blob)
    st = path.stat()
    return stream.Item("data/ds/big.bin", path, st.st_size, st.st_mtime_ns, 0o640), blob


def send(agent, item: stream.Item) -> tuple[int, Preopened, bool]:
    """Upload ``item`` in ranges; returns the bytes skipped, the channels' holder (closed) and
    whether the range server was running when the upload ended."""
    pre = Preopened(agent, [], [], [])
    try:
        skipped = upload_ranged(agent, [item], [], lambda n: None, lambda it, h: None, pre)
        return skipped, pre, pre.server.s is not None
    finally:
        pre.close()


@pytest.mark.parametrize("mux", ["1", "0"])
def test_a_served_upload_arrives_verified_and_the_server_ends(ssh_host: str, tmp_path: Path, mux: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUJOB_MUX", mux)  # the daemon's direct-tcpip channels, and paramiko's own
    item, blob = big_file(tmp_path, 5 * CHUNK + 4321)
    agent = agent_for(ssh_host)
    skipped, pre, served = send(agent, item)
    assert served and not pre.server.refused and skipped == 0
    target = tmp_path / "remote-root" / "data" / "ds" / "big.bin"
    assert target.read_bytes() == blob
    assert target.stat().st_mode & 0o777 == 0o640 and target.stat().st_mtime_ns == item.mtime
    assert sorted(p.name for p in target.parent.iterdir()) == ["big.bin"]  # no part file, no sidecar
    wait_for(lambda: not servers(tmp_path), 30, "the range server to exit once its stdin ended")
    agent.close()


def test_a_cut_served_upload_resumes_sending_only_the_missing_chunks(ssh_host: str, sshd, tmp_path: Path) -> None:
    le = linkemu()
    item, blob = big_file(tmp_path, 8 * CHUNK)
    agent_for(ssh_host).call("hello")  # installed first, so the cut hits the data
    link = le.Link(sshd.port, cut_after_up=24 << 20)  # of 32 MiB: sshd and the sockets hold up to ~10 MiB of it
    cut = agent_for(ssh_host, link.port)
    with pytest.raises(GpujobError) as e:
        send(cut, item)
    link.close()
    cut.close()
    assert "submit again" in e.value.remedy
    target = tmp_path / "remote-root" / "data" / "ds" / "big.bin"
    assert not target.exists()

    def verified() -> int:
        return sum(len(ranges.read_range(target, item.size, 1, k)) for k in range(8))

    wait_for(lambda: not servers(tmp_path), 30, "the range server to exit after the cut")
    held = verified()  # how much arrived before the cut depends on what the buffers held: at least a chunk
    assert 1 <= held < 8
    skipped, pre, served = send(agent_for(ssh_host), item)
    assert served and target.read_bytes() == blob
    assert skipped >= held * CHUNK  # the verified chunks were not sent again


def start_local_server(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, dict]:
    """The instance side on this machine, reached by plain TCP as sshd's forwarding reaches it."""
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUJOB_RANGE_HELLO_WAIT="1")
    p = subprocess.Popen([sys.executable, "-m", "remote", "--root", str(tmp_path / "remote-root"), "range_serve", *args],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    return p, json.loads(p.stdout.readline())


def answer(port: int, hello: bytes) -> bytes:
    """What the server says to a connection that sends ``hello`` (b"": it dropped it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(hello)
        return s.makefile("rb").readline()


def test_a_connection_without_the_token_is_dropped(tmp_path: Path) -> None:
    files = [["../outside.bin", 100, 1], ["data/t/f.bin", 2 * CHUNK, 1]]
    p, doc = start_local_server(tmp_path, "--files", json.dumps(files))
    try:
        assert doc["have"] == {"data/t/f.bin": {"0": [], "1": []}}  # what is held, of safe names only
        token = doc["token"]
        assert len(token) >= 32 and token.encode() not in Path(f"/proc/{p.pid}/cmdline").read_bytes()
        head = json.dumps({"name": "data/t/f.bin", "size": 100, "span": 1, "ranges": "0"}).encode() + b"\n"
        assert answer(doc["port"], b"0" * len(token) + b"\n" + head) == b""  # a wrong token
        assert answer(doc["port"], head) == b""  # none: the header comes first
        assert answer(doc["port"], b"") == b""  # nothing within the deadline
        assert not (tmp_path / "remote-root" / "data" / "t").exists()
        tunnel = connect(HostStore().get("local")).connect(doc["port"])  # the local host's plain socket
        tunnel.wfile.write(token.encode() + b"\n" + head)
        tunnel.wfile.flush()
        assert json.loads(tunnel.rfile.readline()) == {"have": {"0": []}}
        tunnel.close()
    finally:
        p.stdin.close()
        p.wait(30)
    assert p.returncode == 0


def test_the_server_ends_with_its_stdin_even_with_a_channel_open(tmp_path: Path) -> None:
    p, doc = start_local_server(tmp_path)
    try:
        with socket.create_connection(("127.0.0.1", doc["port"]), timeout=20) as s:
            head = {"name": "data/t/f.bin", "size": 3 * CHUNK, "span": 1, "ranges": "0,1,2"}
            s.sendall(f"{doc['token']}\n{json.dumps(head)}\n".encode() + ranges.RMAGIC)
            r = s.makefile("rb")
            assert b"have" in r.readline()
            p.stdin.close()  # the laptop went away mid-upload
            p.wait(30)
            rest = r.read()
        assert p.returncode == 0
        assert b'"exit": 4' in rest and b"ended early" in rest  # the channel was ended as a cut one
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


LAPTOP = """
import sys, time
from gpujob.config.hosts import HostStore
from gpujob.transport import connect, mux
from gpujob.transport.agent import Agent
host = HostStore().get(sys.argv[1])
if sys.argv[2] == "1":
    mux.start(host)
agent = Agent(connect(host), host)
s, doc = agent.stream_doc("range_serve", [])
print("port" in doc, flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("mux", ["1", "0"])
def test_no_server_is_left_when_the_laptop_is_killed(ssh_host: str, tmp_path: Path, mux: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUJOB_MUX=mux)
    laptop = subprocess.Popen([sys.executable, "-c", LAPTOP, ssh_host, mux], env=env, stdout=subprocess.PIPE)
    try:
        assert laptop.stdout.readline() == b"True\n"
        wait_for(lambda: servers(tmp_path), 30, "the range server to run")
        os.kill(laptop.pid, signal.SIGKILL)
        laptop.wait(30)
        wait_for(lambda: not servers(tmp_path), 30, "the range server to exit after the laptop was killed")
    finally:
        if laptop.poll() is None:
            laptop.kill()
            laptop.wait()


@pytest.mark.parametrize("sshd", [{"tcp_forwarding": False}], indirect=True)
@pytest.mark.parametrize("mux", ["1", "0"])
def test_without_tcp_forwarding_the_channels_are_range_commands(ssh_host: str, tmp_path: Path, mux: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUJOB_MUX", mux)
    item, blob = big_file(tmp_path, 4 * CHUNK + 99)
    skipped, pre, _ = send(agent_for(ssh_host), item)
    assert pre.server.refused and skipped == 0
    assert (tmp_path / "remote-root" / "data" / "ds" / "big.bin").read_bytes() == blob
    wait_for(lambda: not servers(tmp_path), 30, "the unused range server to exit")


def test_a_channel_opened_before_the_round_trip_was_measured_gets_the_full_window(ssh_host: str, sshd) -> None:
    """A download that is the connection's first command (``pull``) opens its channel before the
    round trip probe answers: it is granted RTT × 1 Gbit once the answer is in, not left at 2 MB."""
    from dataclasses import replace

    from gpujob.transport.ssh import WINDOW_MIN, SSHTransport

    link = linkemu().Link(sshd.port, delay_ms=20)  # 40 ms round trips: a 5 MB window
    try:
        t = SSHTransport(replace(HostStore().get(ssh_host), port=link.port))
        s = t.stream("cat")  # at once, as pull's send does
        wait_for(lambda: s.chan.in_window_size > 2 * WINDOW_MIN, 10, "the window to be granted")
        s.stdin.write(b"still a working channel\n")
        s.close_stdin()
        assert s.stdout.read() == b"still a working channel\n" and s.wait(10) == 0
        t.close()
    finally:
        link.close()
