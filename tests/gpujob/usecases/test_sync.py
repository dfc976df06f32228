"""The sync engine over a real sshd: a tricky tree mirrored exactly, data skipped by hash,
a cut transfer resumed without resending what had arrived."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gpujob.config.hosts import HostStore
from gpujob.config.spec import DataEntry, JobSpec
from gpujob.errors import GpujobError
from gpujob.transport import connect
from gpujob.transport.agent import Agent
from gpujob.usecases.sync.pull import wire
from gpujob.usecases.sync.upload import sync_job

REPO = Path(__file__).resolve().parents[3]


def linkemu():
    spec = importlib.util.spec_from_file_location("linkemu", REPO / "benchmarks" / "sync" / "linkemu.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["linkemu"] = mod
    spec.loader.exec_module(mod)
    return mod


def agent_for(host_name: str, port: int | None = None) -> Agent:
    host = HostStore().get(host_name)
    if port is not None:
        host = replace(host, port=port)
    return Agent(connect(host), host)


def tricky_tree(top: Path) -> None:
    (top / "sub dir" / "ünïcødé").mkdir(parents=True)
    (top / "empty" / "nested-empty").mkdir(parents=True)
    (top / "main.py").write_text("print('hi')\n")
    (top / "run.sh").write_text("#!/bin/sh\necho run\n")
    (top / "run.sh").chmod(0o755)
    (top / "sub dir" / "a file with spaces.txt").write_text("spaces\n")
    (top / "sub dir" / "ünïcødé" / "данные.txt").write_text("unicode\n")
    (top / "zero").write_bytes(b"")
    (top / "big.bin").write_bytes(os.urandom(9 << 20) + b"tail")
    os.symlink("main.py", top / "link-to-main")
    os.symlink("sub dir", top / "link-to-dir")
    os.symlink("/nonexistent/outside", top / "dangling")


def spec_for(src: Path, data: list[DataEntry] | None = None) -> JobSpec:
    return JobSpec(name="proj", run="true", workdir=str(src), data=data or [])


def diff(a: Path, b: Path) -> str:
    r = subprocess.run(["diff", "-r", "--no-dereference", str(a), str(b)], capture_output=True, text=True)
    return r.stdout + r.stderr


def exec_bits(top: Path) -> dict[str, int]:
    return {str(p.relative_to(top)): p.lstat().st_mode & 0o111 for p in top.rglob("*") if p.is_file() and not p.is_symlink()}


def test_tricky_tree_mirrored_then_changes_and_deletions(ssh_host: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    tricky_tree(src)
    agent = agent_for(ssh_host)
    rep = sync_job(agent, spec_for(src), "proj")
    code = tmp_path / "remote-root" / "projects" / "proj" / "code"
    assert diff(src, code) == ""
    assert exec_bits(src) == exec_bits(code)
    assert (code / "empty" / "nested-empty").is_dir()
    assert rep.round_trips == 2 and rep.files_sent >= 9
    assert not list(code.rglob("*.gpujob-part*"))

    # no-op: one round trip, nothing sent
    again = sync_job(agent, spec_for(src), "proj")
    assert (again.files_sent, again.round_trips) == (0, 1)

    # changes, deletions, a file replaced by a folder, an exec bit flipped
    old_inode = (code / "main.py").stat().st_ino
    (src / "main.py").write_text("print('changed')\n")
    (src / "zero").unlink()
    (src / "link-to-dir").unlink()
    (src / "sub dir" / "a file with spaces.txt").unlink()
    (src / "empty" / "nested-empty").rmdir()
    (src / "run.sh").chmod(0o644)
    (src / "new dir").mkdir()
    (src / "new dir" / "new.txt").write_text("new\n")
    rep2 = sync_job(agent, spec_for(src), "proj")
    assert diff(src, code) == ""
    assert exec_bits(src) == exec_bits(code)
    assert rep2.deleted >= 4
    assert (code / "main.py").stat().st_ino != old_inode  # a new inode: snapshots keep the old file

    # touched but unchanged content: equal hashes, nothing sent
    os.utime(src / "big.bin", (1_000_000_000, 1_000_000_000))
    rep3 = sync_job(agent, spec_for(src), "proj")
    assert rep3.files_sent == 0 and rep3.round_trips == 1


def test_data_skipped_by_hash_and_free_space(ssh_host: str, tmp_path: Path) -> None:
    src = tmp_path / "code"
    src.mkdir()
    (src / "train.py").write_text("pass\n")
    data = tmp_path / "dataset"
    data.mkdir()
    for i in range(3):
        (data / f"shard-{i}.bin").write_bytes(os.urandom(1 << 20))
    agent = agent_for(ssh_host)
    spec = spec_for(src, [DataEntry(str(data), "ds")])
    first = sync_job(agent, spec, "proj")
    assert first.bytes_sent >= 3 << 20
    remote = tmp_path / "remote-root" / "projects" / "proj" / "data" / "ds"  # the project's staging
    assert diff(data, remote) == ""
    # the same content with new mtimes on both sides (copied anew): skipped by hash in one round trip
    for p in list(data.iterdir()) + list(remote.iterdir()):
        os.utime(p, (1_500_000_000 + hash(p.name) % 1000, 1_500_000_000 + hash(str(p)) % 1000))
    second = sync_job(agent, spec, "proj")
    assert (second.files_sent, second.round_trips) == (0, 1)


def test_cut_transfer_resumes_without_resending(ssh_host: str, sshd, tmp_path: Path) -> None:
    le = linkemu()
    src = tmp_path / "src"
    src.mkdir()
    for i in range(5):
        (src / f"a-small-{i}.txt").write_bytes(os.urandom(20_000))
    big = os.urandom(16 << 20)
    (src / "b-big.bin").write_bytes(big)
    (src / "c-after.bin").write_bytes(os.urandom(1 << 20))
    code = tmp_path / "remote-root" / "projects" / "proj" / "code"

    # the agent is installed first, so the cut hits the data
    agent_for(ssh_host).call("hello")
    link = le.Link(sshd.port, cut_after_up=11 << 20)
    with pytest.raises(GpujobError):
        sync_job(agent_for(ssh_host, link.port), spec_for(src), "proj")
    link.close()
    assert not (code / "b-big.bin").exists()  # never visible half-written
    part = Path(wire.part_path(code / "b-big.bin"))
    def smalls_kept() -> bool:
        return all((code / f"a-small-{i}.txt").is_file() for i in range(5))

    # the agent notices the cut link, records the verified prefix and finishes the small files'
    # writes (its writer threads may still run when the part's sidecar is saved)
    deadline = time.time() + 10
    while not (wire.part_chunks(code / "b-big.bin") and smalls_kept()) and time.time() < deadline:
        time.sleep(0.1)
    verified = wire.part_chunks(code / "b-big.bin")
    assert part.exists() and len(verified) >= 2
    assert smalls_kept()

    link2 = le.Link(sshd.port)
    rep = sync_job(agent_for(ssh_host, link2.port), spec_for(src), "proj")
    link2.close()
    assert diff(src, code) == ""
    assert rep.resumed_bytes == len(verified) * wire.CHUNK
    # finished files were not resent and the big one resumed: far less than the whole tree went up
    whole = (16 << 20) + (1 << 20) + 100_000
    assert link2.up < whole - len(verified) * wire.CHUNK + (1 << 20)
    assert rep.files_sent == 2


def records(stream: bytes) -> list[tuple[bytes, object, bytes]]:
    """The (type, header, payload) records of an uncompressed stream."""
    import json
    import struct

    assert stream[:4] == wire.MAGIC
    out, pos = [], 4
    while pos < len(stream):
        kind, n = struct.unpack(">cI", stream[pos:pos + 5])
        head = json.loads(stream[pos + 5:pos + 5 + n])
        pos += 5 + n
        size = sum(e[4] for e in head if e[0] == "f") if kind == b"B" else 0
        out.append((kind, head, stream[pos:pos + size]))
        pos += size
    return out


def small_tree(src: Path, n: int = 5) -> list:
    src.mkdir()
    items = []
    for i in range(n):
        p = src / f"f{i}.py"
        p.write_text(f"print({i})\n" * (i + 1))
        st = p.stat()
        items.append(wire.Item(f"code/f{i}.py", p, st.st_size, st.st_mtime_ns,
                                 {1: 0o755, 2: 0o666}.get(i, 0o644)))
    return items


def test_small_files_travel_in_batches_under_one_header(tmp_path: Path) -> None:
    """Small files: one JSON header per batch, then their bytes; the reader verifies each."""
    import io

    buf = io.BytesIO()
    wire.write_items(buf, small_tree(tmp_path / "src"))
    recs = records(buf.getvalue())
    assert [k for k, _, _ in recs] == [b"B", b"E"]
    assert [e[1] for e in recs[0][1]] == [f"code/f{i}.py" for i in range(5)]
    res = wire.read_items(tmp_path / "dst", io.BytesIO(buf.getvalue()))
    dst = tmp_path / "dst" / "code"
    assert res["written"] == 5 and (dst / "f4.py").read_text() == "print(4)\n" * 5
    assert [(dst / f"f{i}.py").stat().st_mode & 0o777 for i in range(3)] == [0o644, 0o755, 0o666]  # umask or not
    # compressed the same way the laptop sends it
    gz = io.BytesIO()
    comp = wire.Compressed(gz, "gz:1")
    wire.write_items(comp, small_tree(tmp_path / "src2"))
    comp.finish()
    assert wire.read_items(tmp_path / "dst3", io.BytesIO(gz.getvalue()))["written"] == 5
    # a corrupted batch entry is refused, not written; the ones before it are kept
    bad = buf.getvalue().replace(b"print(2)", b"print(9)")
    with pytest.raises(wire.TransferError, match="hash mismatch"):
        wire.read_items(tmp_path / "dst2", io.BytesIO(bad))
    assert not (tmp_path / "dst2" / "code" / "f2.py").exists()
    assert (tmp_path / "dst2" / "code" / "f1.py").exists()
    assert not list((tmp_path / "dst2").rglob("*.gpujob-part*"))


def framed(*recs: tuple[bytes, object, bytes], end: bool = True) -> bytes:
    body = b"".join(wire.frame(k, h) + p for k, h, p in recs)
    return wire.MAGIC + body + (wire.frame(b"E", {}) if end else b"")


def f_entry(name: str, data: bytes = b"x") -> tuple[list, bytes]:
    return ["f", name, 0o644, 0, len(data), wire.small_hash(data)], data


def batch(*ents: tuple[list, bytes]) -> tuple[bytes, object, bytes]:
    return b"B", [e for e, _ in ents], b"".join(d for _, d in ents)


@pytest.mark.parametrize("stream, match", [
    (framed(batch(f_entry("ok.txt"), f_entry("../up.txt"))), "outside"),
    (framed(batch(f_entry("ok.txt"), f_entry("/tmp/abs.txt"))), "outside"),
    (framed(batch(f_entry("ok.txt"), f_entry("a//b"))), "outside"),
    (framed(batch(f_entry("ok.txt"), (["f", "big", 0o644, 0, 99 << 20, "0"], b""))), "bad file entry"),
    (framed(batch(f_entry("ok.txt"), (["f", "neg", 0o644, 0, -1, "0"], b""))), "bad file entry"),
    (framed(batch(f_entry("ok.txt"), (["p", "fifo", 0], b""))), "not a file"),
    (framed(batch(f_entry("ok.txt")), (b"Z", {}, b"")), "unknown record"),
    (framed(batch(f_entry("ok.txt")), (b"F", {"n": "x", "mode": 420, "mtime": 0, "size": 10, "off": 3}, b"")), "bad file record"),
    (framed(batch(f_entry("ok.txt")), end=False), "ended early"),
    (framed(batch(f_entry("ok.txt")))[:-3] + b"\xff\xff\xff", "ended early|record header"),
    (wire.MAGIC + b"B\x7f\xff\xff\xff", "record header"),
    (b"not a stream at all", "not a gpujob stream"),
])
def test_crafted_streams_are_refused(tmp_path: Path, stream: bytes, match: str) -> None:
    """The receiver refuses traversal, links out (with links_out off), bad sizes and kinds, and
    cut or garbage streams; files that came verified before the bad part are kept."""
    import io

    dest = tmp_path / "dest"
    with pytest.raises(wire.TransferError, match=match):
        wire.read_items(dest, io.BytesIO(stream), links_out=False)
    names = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert names in (["dest"], ["dest", "dest/ok.txt"])
    if match == "outside":  # refused at the bad entry: the verified one before it was written
        assert names == ["dest", "dest/ok.txt"]


def test_hash_cache_pruned_of_files_gone(tmp_path: Path) -> None:
    import io

    base = tmp_path / "root"
    cache = wire.HashCache(tmp_path / "cache.json")
    buf = io.BytesIO()
    wire.write_items(buf, small_tree(tmp_path / "src"))
    wire.read_items(base, io.BytesIO(buf.getvalue()), cache=cache)
    assert len(cache.data) == 5
    (base / "code" / "f3.py").unlink()
    wire.delete_paths(base, ["code/f4.py"], cache)
    t = wire.tree(base / "code", cache)
    cache.save()
    assert sorted(t["files"]) == ["f0.py", "f1.py", "f2.py"] and all(v[4] for v in t["files"].values())
    assert sorted(Path(k).name for k in wire.HashCache(tmp_path / "cache.json").data) == ["f0.py", "f1.py", "f2.py"]
