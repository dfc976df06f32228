"""A large file up over several channels at once (gpujob/usecases/sync/ranges.py, remote/stream/ranges.py),
over the real sshd: byte-identical whatever order the ranges arrive in, a cut upload resumes
sending only the missing chunks, a corrupt chunk is refused, a killed laptop leaves no file
under the final name. Small files: 4 MiB chunks, one per range, a 6 MiB threshold."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpujob.config.spec import DataEntry
from gpujob.errors import GpujobError
from gpujob.usecases.sync.ranges import ranges, stream
from gpujob.usecases.sync.upload import sync_job
from tests.gpujob.usecases.test_sync import REPO, agent_for, linkemu, spec_for

CHUNK = stream.CHUNK


@pytest.fixture(autouse=True)
def small_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUJOB_RANGE_MIN", str(6 << 20))
    monkeypatch.setenv("GPUJOB_RANGE_SPAN", "1")
    monkeypatch.setenv("GPUJOB_RANGE_CHANNELS", "3")


def big_tree(tmp_path: Path, size: int = 5 * CHUNK + 12345) -> tuple[Path, bytes]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.py").write_text("print('hi')\n")
    blob = os.urandom(size)
    (src / "model.bin").write_bytes(blob)
    return src, blob


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".gpujob-"))


@pytest.mark.parametrize("mux", ["1", "0"])
def test_a_ranged_upload_is_byte_identical_and_leaves_nothing_behind(ssh_host: str, tmp_path: Path, mux: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUJOB_MUX", mux)  # over the kept connection's daemon, and a connection of its own
    src, blob = big_tree(tmp_path)
    os.chmod(src / "model.bin", 0o751)
    rep = sync_job(agent_for(ssh_host), spec_for(src), "proj")
    code = tmp_path / "remote-root" / "projects" / "proj" / "code"
    assert (code / "model.bin").read_bytes() == blob
    assert (code / "main.py").read_text() == "print('hi')\n"
    st, lst = (code / "model.bin").stat(), (src / "model.bin").stat()
    assert (st.st_mode & 0o777, st.st_mtime_ns) == (0o751, lst.st_mtime_ns)
    assert rep.files_sent == 2 and rep.bytes_sent >= len(blob)
    assert leftovers(code) == []
    again = sync_job(agent_for(ssh_host), spec_for(src), "proj")  # recorded as sent: a no-op
    assert again.files_sent == 0 and again.bytes_sent == 0


def channel(agent, name: str, size: int, ks: list[int]):
    return agent.stream_doc("range", ["--name", name, "--size", str(size), "--span", "1",
                                      "--ranges", ",".join(map(str, ks))])


def test_ranges_arriving_out_of_order_make_the_same_file(ssh_host: str, tmp_path: Path) -> None:
    blob = os.urandom(4 * CHUNK + 777)
    agent = agent_for(ssh_host)
    agent.call("hello")
    ks = [4, 1, 3, 0, 2]
    s, doc = channel(agent, "data/ooo/f.bin", len(blob), ks)
    assert doc == {"have": {str(k): [] for k in ks}}
    s.stdin.write(ranges.RMAGIC)
    hashes = {}
    for k in ks:  # last range first
        data = blob[k * CHUNK:(k + 1) * CHUNK]
        hashes[k] = hashlib.sha256(data).hexdigest()
        s.stdin.write(stream.frame(b"R", {"k": k, "off": 0}) + stream.frame(b"C", {"h": hashes[k]}) + data)
    s.stdin.write(stream.frame(b"E", {}))
    s.stdin.flush()
    assert json.loads(s.stdout.readline())["done"]
    whole = hashlib.sha256("".join(hashes[k] for k in range(5)).encode()).hexdigest()
    h = stream.Hasher()
    h.update(blob)
    assert h.hexdigest() == whole
    s.stdin.write(stream.frame(b"V", {"h": whole, "mode": 0o644, "mtime": 1_700_000_000_000_000_000}))
    s.close_stdin()
    out = s.stdout.read()
    assert s.wait(60) == 0, out + s.stderr_text().encode()
    target = tmp_path / "remote-root" / "data" / "ooo" / "f.bin"
    assert target.read_bytes() == blob
    assert target.stat().st_mtime_ns == 1_700_000_000_000_000_000
    assert leftovers(target.parent) == []


def test_a_corrupt_chunk_is_refused_and_what_was_verified_is_kept(ssh_host: str, tmp_path: Path) -> None:
    blob = os.urandom(3 * CHUNK)
    agent = agent_for(ssh_host)
    agent.call("hello")
    s, _ = agent.stream_doc("range", ["--name", "data/bad/f.bin", "--size", str(len(blob)), "--span", "3",
                                      "--ranges", "0"])
    good, bad = blob[:CHUNK], bytearray(blob[CHUNK:2 * CHUNK])
    s.stdin.write(ranges.RMAGIC + stream.frame(b"R", {"k": 0, "off": 0}))
    s.stdin.write(stream.frame(b"C", {"h": hashlib.sha256(good).hexdigest()}) + good)
    announced = hashlib.sha256(bytes(bad)).hexdigest()
    bad[100] ^= 0xFF  # flipped on the way
    s.stdin.write(stream.frame(b"C", {"h": announced}) + bytes(bad))
    s.stdin.flush()
    s.close_stdin()
    out = s.stdout.read()
    assert s.wait(60) != 0
    assert b"corrupt" in out, out
    target = tmp_path / "remote-root" / "data" / "bad" / "f.bin"
    assert not target.exists()
    assert ranges.read_range(target, len(blob), 3, 0) == [hashlib.sha256(good).hexdigest()]
    # and a commit that claims the whole file is refused: range 0 is incomplete
    s, _ = agent.stream_doc("range", ["--name", "data/bad/f.bin", "--size", str(len(blob)), "--span", "3",
                                      "--ranges", "0"])
    s.stdin.write(ranges.RMAGIC + stream.frame(b"E", {}) + stream.frame(b"V", {"h": "0" * 64, "mode": 420, "mtime": 1}))
    s.close_stdin()
    out = s.stdout.read()
    assert s.wait(60) != 0 and b"incomplete" in out, out
    assert not target.exists()


def test_a_cut_ranged_upload_resumes_sending_only_the_missing_chunks(ssh_host: str, sshd, tmp_path: Path) -> None:
    le = linkemu()
    src, blob = big_tree(tmp_path, 8 * CHUNK)
    agent_for(ssh_host).call("hello")  # installed first, so the cut hits the data
    link = le.Link(sshd.port, cut_after_up=18 << 20)
    with pytest.raises(GpujobError) as e:
        sync_job(agent_for(ssh_host, link.port), spec_for(src), "proj")
    link.close()
    assert "submit again" in e.value.remedy
    code = tmp_path / "remote-root" / "projects" / "proj" / "code"
    assert not (code / "model.bin").exists()  # never visible half-written
    size = len(blob)

    def verified() -> int:
        return sum(len(ranges.read_range(code / "model.bin", size, 1, k)) for k in range(8))

    deadline = time.time() + 15  # the range commands notice the cut and record what they verified
    while verified() < 2 and time.time() < deadline:
        time.sleep(0.1)
    done = verified()  # the chunks in flight on parallel channels at the cut: 1 or more arrived whole
    assert done >= 1
    rep = sync_job(agent_for(ssh_host), spec_for(src), "proj")
    assert (code / "model.bin").read_bytes() == blob
    assert rep.bytes_sent < size and rep.resumed_bytes >= done * CHUNK
    assert leftovers(code) == []


KILLED = """
import sys
from pathlib import Path
from dataclasses import replace
from gpujob.transport.agent import Agent
from gpujob.config.hosts import HostStore
from gpujob.config.spec import JobSpec
from gpujob.usecases.sync.upload import sync_job
from gpujob.transport import connect
host = replace(HostStore().get(sys.argv[1]), port=int(sys.argv[2]))
sync_job(Agent(connect(host), host), JobSpec(name="proj", run="true", workdir=sys.argv[3]), "proj")
"""


def test_a_killed_laptop_leaves_no_file_under_the_final_name(ssh_host: str, sshd, tmp_path: Path) -> None:
    le = linkemu()
    src, blob = big_tree(tmp_path, 8 * CHUNK)
    agent_for(ssh_host).call("hello")
    link = le.Link(sshd.port, mbit=40)  # 5 MB/s: the upload takes seconds
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-c", KILLED, ssh_host, str(link.port), str(src)], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    code = tmp_path / "remote-root" / "projects" / "proj" / "code"
    part = Path(stream.part_path(code / "model.bin"))
    try:
        deadline = time.time() + 60
        while not (part.exists() and part.stat().st_size > CHUNK) and p.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert p.poll() is None, "the upload ended before it could be killed"
        os.kill(p.pid, signal.SIGKILL)
        p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
        link.close()
    assert not (code / "model.bin").exists()
    rep = sync_job(agent_for(ssh_host), spec_for(src), "proj")  # and the next try completes it
    assert (code / "model.bin").read_bytes() == blob
    assert rep.files_sent >= 1 and leftovers(code) == []


def test_a_data_entry_goes_in_ranges_too(ssh_host: str, tmp_path: Path) -> None:
    src, blob = big_tree(tmp_path)
    data = tmp_path / "ds"
    data.mkdir()
    (data / "shard.bin").write_bytes(blob[::-1])
    sync_job(agent_for(ssh_host), spec_for(src, [DataEntry(str(data), "ds")]), "proj")
    assert (tmp_path / "remote-root" / "projects" / "proj" / "data" / "ds" / "shard.bin").read_bytes() == blob[::-1]


def test_channels_are_sized_from_the_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpujob.usecases.sync.ranges import MAX_CHANNELS, channels_for

    monkeypatch.delenv("GPUJOB_RANGE_CHANNELS")
    assert channels_for(0.0002, 40) == 1  # loopback: one channel carries it
    assert channels_for(0.040, 40) == 3  # 3 × 2 MB per 40 ms covers 1 Gbit
    assert channels_for(0.150, 40) == MAX_CHANNELS == 8
    assert channels_for(0.150, 2) == 2  # never more channels than ranges
    assert channels_for(None, 40) == 4
    monkeypatch.setenv("GPUJOB_RANGE_CHANNELS", "5")
    assert channels_for(0.0002, 40) == 5
