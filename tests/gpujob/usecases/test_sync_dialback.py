"""A large upload's first channels dialled back by the range server (gpujob/transport/dialback.py,
remote/stream/rangeserve.py ``dial_request``), over the real sshd: the server connects to a port
sshd forwards to the laptop, each connection arrives as a channel already open, and the laptop
sends only on the ones whose origin the server named on its stdout. A stranger on the host who
connects to that port gets nothing and the upload still arrives whole. Small files: 4 MiB
chunks, one per range, three channels."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from gpujob.usecases.sync.ranges import Preopened, rangeserve, stream, upload_ranged
from gpujob.usecases.sync.record import Record
from gpujob.usecases.sync.tree import scan
from tests.gpujob.usecases.test_sync import agent_for
from tests.gpujob.usecases.test_sync_ranges import small_ranges  # noqa: F401  (the same small ranges)
from tests.helpers import wait_for

CHUNK = stream.CHUNK


pytestmark = pytest.mark.usefixtures("small_ranges")


@pytest.fixture(autouse=True)
def own_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUJOB_MUX", "0")  # paramiko's own connection: the multiplexer's daemon forwards nothing back


def preopen(tmp_path: Path, ssh_host: str) -> tuple[object, Preopened, stream.Item, bytes]:
    """A large local file, and its channels opened as a sync opens them before the manifest."""
    src = tmp_path / "src"
    src.mkdir()
    blob = os.urandom(4 * CHUNK + 777)
    (src / "model.bin").write_bytes(blob)
    tree = scan(src, "data/dial", use_ignore_files=False)
    agent = agent_for(ssh_host)
    agent.call("hello")
    pre = Preopened(agent, [tree], [Record.blank(None)], [])
    st = tree.files["model.bin"]
    item = stream.Item(tree.arc("model.bin"), tree.path("model.bin"), st[0], st[1], st[4])
    return agent, pre, item, blob


def test_the_first_channels_are_dialled_back_and_the_file_arrives_verified(ssh_host: str, tmp_path: Path) -> None:
    agent, pre, item, blob = preopen(tmp_path, ssh_host)
    try:
        skipped = upload_ranged(agent, [item], [], lambda n: None, lambda it, h: None, pre)
    finally:
        pre.close()
    assert skipped == 0 and pre.server.dialled == 3  # every channel was one the server dialled
    target = tmp_path / "remote-root" / "data" / "dial" / "model.bin"
    assert target.read_bytes() == blob
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.bin"]  # no part file, no sidecar
    agent.close()


def test_a_stranger_on_the_forwarded_port_gets_nothing(ssh_host: str, tmp_path: Path) -> None:
    agent, pre, item, blob = preopen(tmp_path, ssh_host)
    strangers = []
    try:
        back = pre.server.back
        assert back is not None and back.port  # sshd forwards a port of the host's loopback to the laptop
        for _ in range(2):  # another process on the host connects there first
            strangers.append(socket.create_connection(("127.0.0.1", back.port), 10))
        wait_for(lambda: back.arrived.qsize() >= 2 or pre.server.dialled, 30, "the strangers' channels to reach the laptop")
        skipped = upload_ranged(agent, [item], [], lambda n: None, lambda it, h: None, pre)
    finally:
        pre.close()  # a stranger's channel not looked at by then is closed here
    try:
        for s in strangers:
            s.settimeout(30)
            assert s.recv(1 << 20) == b""  # closed unread: no byte of the file, no header
    finally:
        for s in strangers:
            s.close()
    assert skipped == 0 and pre.server.dialled == 3
    assert (tmp_path / "remote-root" / "data" / "dial" / "model.bin").read_bytes() == blob
    agent.close()


def test_a_dial_request_is_bounded() -> None:
    ask = rangeserve.dial_request
    assert ask(b'{"dial": 40000, "n": 3}\n') == [40000, 3]
    for bad in (b'{"dial": 0, "n": 3}', b'{"dial": 70000, "n": 3}', b'{"dial": "22", "n": 3}',
                b'{"dial": 40000, "n": 0}', b'{"dial": 40000, "n": 65}', b'[40000, 3]', b'not json', b'\xff'):
        assert ask(bad) is None
