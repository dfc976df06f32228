"""The three transports keep one contract: the same stream behaviour, an ``Endpoint`` as their
only input, and the kept-agent call only where a kept connection exists."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Sshd


@pytest.fixture(params=["local", "ssh", "mux"])
def transport(request: pytest.FixtureRequest, sshd: Sshd, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[object]:
    from gpujob.config.keys import known_hosts_path, public_key_line
    from gpujob.config.paths import config_dir
    from gpujob.transport import Endpoint, connect

    if request.param == "local":
        ep = Endpoint(name="local", kind="local", root=str(tmp_path / "root"))
    else:
        sshd.authorize(public_key_line())
        # a hand-made endpoint, in no profile store: the mux daemon must not need one
        ep = Endpoint(name="nowhere-saved", hostname="127.0.0.1", port=sshd.port, user=os.environ.get("USER", "root"),
                      root=str(tmp_path / "root"), client_key=str(config_dir() / "id_ed25519"), known_hosts=str(known_hosts_path()), connect_timeout=5)
        if request.param == "ssh":
            monkeypatch.setenv("GPUJOB_MUX", "0")
        else:
            from gpujob.transport import mux

            assert mux.start(ep)  # a first connect answers on its own connection; this one wants the kept one
    t = connect(ep)
    assert type(t).__name__ == {"local": "LocalTransport", "ssh": "SSHTransport", "mux": "MuxTransport"}[request.param]
    assert not (Path(config_dir()) / "hosts.yaml").exists()
    yield t
    t.close()


def test_streams_read_alike(transport) -> None:
    s = transport.stream("read a; echo got $a; echo oops >&2; sleep 30; echo never")
    try:
        s.stdin.write(b"hello\n")
        s.stdin.flush()
        # what has arrived comes back at once, though the command goes on (no full buffer awaited)
        got = b""
        while not got.endswith(b"\n"):
            chunk = s.read_some()
            assert chunk, "the stream ended early"
            got += chunk
        assert got == b"got hello\n"
        with pytest.raises(TimeoutError):
            s.wait(0.3)
    finally:
        s.kill()
    s = transport.stream("cat; echo bad >&2; exit 3")
    with s:
        def feed() -> None:  # beside the reader: more than a pipe holds
            s.stdin.write(b"x" * 200_000)
            s.close_stdin()

        threading.Thread(target=feed, daemon=True).start()
        assert s.stdout.read() == b"x" * 200_000
        assert s.wait(30) == 3
        assert s.stderr_text().endswith("bad\n")  # (after whatever the login shell prints)


def test_stdout_reads_mixed_alike(transport, tmp_path: Path) -> None:
    """readline (whole and cut at its limit), read1, read(n) and read() in turn give the command's
    bytes exactly, past several receive windows (SSH reads its channel in the reading thread)."""
    import random

    rnd = random.Random(38)
    data = b"first line\nsecond\n" + bytes(rnd.getrandbits(8) for _ in range(1 << 16)) * 80  # 5 MiB, newlines inside
    src = tmp_path / "out.bin"
    src.write_bytes(data)
    s = transport.stream(f"cat {src}")
    with s:
        got = [s.stdout.readline(), s.stdout.readline(3), s.stdout.readline(1 << 20)]
        assert got == [b"first line\n", b"sec", b"ond\n"]
        got.append(s.stdout.read1(5))
        assert 1 <= len(got[-1]) <= 5
        got.append(s.stdout.read(100_000))
        assert len(got[-1]) == 100_000
        for _ in range(3):
            got.append(s.stdout.readline(1 << 20))
        got.append(s.stdout.read())
        assert b"".join(got) == data
        assert s.stdout.read() == b"" and s.stdout.read1(10) == b""
        assert s.wait(30) == 0


def test_kept_agent_call_only_on_the_kept_connection(transport, tmp_path: Path) -> None:
    from gpujob.transport.agent import Agent

    with Agent(transport) as agent:
        assert agent.t.keeps_agent == (type(transport).__name__ == "MuxTransport")
        if not agent.t.keeps_agent:
            assert transport.serve_call(agent.command("serve"), ["hello"], 30) is None
        doc = agent.call("hello")  # served by the kept agent, or a command of its own
        assert doc["protocol"] and (tmp_path / "root" / "agent" / agent.version / "ok").exists()


def test_an_agent_upload_cut_between_two_members_installs_nothing(tmp_path: Path) -> None:
    """A laptop killed mid-upload cuts the bundle's stream; tar ends without an error when the cut falls
    between two members, and that half tree was once marked installed: every later command then failed
    (No module named 'remote.core'). The install takes the tree only with the bundle's last member."""
    import io
    import tarfile

    from gpujob.bundle import BUNDLE_END, bundle_tar
    from gpujob.transport import Endpoint, connect
    from gpujob.transport.agent import Agent

    whole = bundle_tar()
    with tarfile.open(fileobj=io.BytesIO(whole)) as tar:
        members = tar.getmembers()
    assert members[-1].name == BUNDLE_END
    agents = tmp_path / "root" / "agent"
    with Agent(connect(Endpoint(name="local", kind="local", root=str(tmp_path / "root")))) as agent:
        for m in members[1:6]:  # cut at a member's header: tar itself says nothing is wrong
            res = agent.t.run(agent._install_command(), input=whole[:m.offset], timeout=60)
            assert res.rc != 0 and not (agents / agent.version / "ok").exists(), m.name
            assert not list(agents.glob("*.tmp.*"))  # the half tree is gone too
        assert agent.call("hello")["protocol"]  # the next command installs the whole bundle and is answered
    assert (agents / agent.version / "remote" / "core").is_dir()
