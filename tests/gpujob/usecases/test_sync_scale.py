"""A sync's cost follows what changed: a no-op is one digest compared in one round trip (no
manifest of the tree comes back), and the laptop's record never hides a change made on the host."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpujob.config.paths import cache_dir
from gpujob.usecases.sync.upload import sync_job
from tests.gpujob.usecases.test_sync import agent_for, diff, linkemu, spec_for


def tree(top: Path, n: int) -> None:
    for i in range(n):
        d = top / f"pkg{i % 20}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"module_with_a_long_name_{i}.py").write_text(f"x = {i}\n" * 20)


def test_noop_and_one_change_send_no_manifest(ssh_host: str, sshd, tmp_path: Path) -> None:
    src = tmp_path / "src"
    tree(src, 1500)  # its manifest would be about 200 KB
    agent_for(ssh_host).call("hello")
    assert sync_job(agent_for(ssh_host), spec_for(src), "proj").files_sent == 1500
    le = linkemu()

    link = le.Link(sshd.port)
    rep = sync_job(agent_for(ssh_host, link.port), spec_for(src), "proj")
    link.close()
    assert (rep.files_sent, rep.round_trips, rep.unchanged) == (0, 1, 1500)
    assert link.down < 40_000, link.down  # SSH's handshake and one small answer

    (src / "pkg3" / "module_with_a_long_name_3.py").write_text("x = 'changed'\n")
    link = le.Link(sshd.port)
    rep = sync_job(agent_for(ssh_host, link.port), spec_for(src), "proj")
    link.close()
    assert (rep.files_sent, rep.round_trips) == (1, 2)
    assert link.down < 40_000, link.down
    assert diff(src, tmp_path / "remote-root" / "projects" / "proj" / "code") == ""


@pytest.fixture(params=["gnu-find", "no-find"])
def find_or_not(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """With GNU find both ends stamp their trees with its listing; without it (a ``find`` that
    fails, as BSD find does on ``-printf``) with their Python walks."""
    if request.param == "no-find":
        fake = tmp_path / "fakebin"
        fake.mkdir()
        (fake / "find").write_text("#!/bin/sh\necho 'find: unknown predicate -printf' >&2\nexit 1\n")
        (fake / "find").chmod(0o755)
        monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    return request.param


def test_changes_on_the_host_are_seen_despite_the_record(find_or_not: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    tree(src, 30)
    monkeypatch.setenv("GPUJOB_LOCAL_ROOT", str(tmp_path / "remote-root"))  # the agent inherits PATH here
    code = tmp_path / "remote-root" / "projects" / "proj" / "code"
    agent = agent_for("local")
    sync_job(agent, spec_for(src), "proj")

    # edited in place (same size), deleted and added on the host: its digest no longer matches
    victim = code / "pkg1" / "module_with_a_long_name_1.py"
    data = victim.read_bytes()
    with open(victim, "r+b") as f:
        f.write(b"y" + data[1:])
    (code / "pkg2" / "module_with_a_long_name_2.py").unlink()
    (code / "stray.txt").write_text("left by a job\n")
    rep = sync_job(agent, spec_for(src), "proj")
    assert diff(src, code) == ""
    assert (rep.files_sent, rep.deleted) == (2, 1)

    # the laptop's record lost: the host's manifest and content hashes decide, nothing is resent
    shutil.rmtree(cache_dir() / "sync")
    os.utime(src / "pkg4" / "module_with_a_long_name_4.py", (1_000_000_000, 1_000_000_000))
    rep = sync_job(agent, spec_for(src), "proj")
    assert (rep.files_sent, rep.round_trips, rep.unchanged) == (0, 1, 30)
    assert sync_job(agent, spec_for(src), "proj").files_sent == 0
    os.utime(victim, (1_000_000_000, 1_000_000_000))  # the host's tree moved, its content did not
    assert sync_job(agent, spec_for(src), "proj").files_sent == 0

    # a damaged record: the host's manifest decides, the change still travels
    for rec in (cache_dir() / "sync").glob("*.json"):
        rec.write_text("{not json")
    (src / "pkg5" / "module_with_a_long_name_5.py").write_text("x = 'changed'\n")
    rep = sync_job(agent, spec_for(src), "proj")
    assert diff(src, code) == "" and rep.files_sent == 1
    assert sync_job(agent, spec_for(src), "proj").files_sent == 0


def test_hash_cache_appends_changes_and_folds_them_in(tmp_path: Path) -> None:
    from gpujob.usecases.sync.upload import stream

    path = tmp_path / "cache" / "hashes.json"
    files = []
    for i in range(3):
        f = tmp_path / f"f{i}"
        f.write_text(str(i))
        files.append(f)
    first = stream.HashCache(path)
    for f in files:
        first.hash(f)
    first.save()
    log = Path(str(path) + ".log")
    before = log.read_text().splitlines()

    # a receive of one file: one line appended, the object neither read nor rewritten
    (tmp_path / "f0").write_text("changed")
    one = stream.HashCache(path)
    one.put(files[0], "h0")
    one.drop(str(files[1]))
    one.save()
    assert one._data is None and not path.exists()  # nothing was read or rewritten
    assert log.read_text().splitlines()[: len(before)] == before and len(log.read_text().splitlines()) == len(before) + 2
    seen = stream.HashCache(path)
    assert seen.get(files[0], files[0].stat()) == "h0" and str(files[1]) not in seen.data
    assert seen.get(files[2], files[2].stat()) is not None

    # a log past a quarter of the object (and 1 MB) is folded into it
    many = stream.HashCache(path)
    for i in range(12_000):
        many.set(f"/x/{i}", [1, 2, 3, "h"])
    many.save()
    assert not log.exists() and path.exists()
    folded = stream.HashCache(path).data
    assert len(folded) == 12_002 and folded[str(files[0])][-1] == "h0" and str(files[1]) not in folded


def settle(top: Path) -> None:
    """Wait until every stamp under ``top`` is older than the racy window, so both ends may
    trust their stamps (what happens between edits and a submit at human pace)."""
    import time

    from gpujob.usecases.sync.upload import stream

    newest = max(p.lstat().st_ctime_ns for p in [top, *top.rglob("*")])
    deadline = time.time() + 10
    while stream.racy(newest, time.time_ns()) and time.time() < deadline:
        time.sleep(0.05)


def test_changes_between_settled_syncs(find_or_not: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With GNU find the second sync plans from the lines of find's listing that changed."""
    src = tmp_path / "src"
    tree(src, 40)
    (src / ".gitignore").write_text("*.log\nbuild/\n")
    (src / "dir-to-file").mkdir()
    (src / "dir-to-file" / "x.py").write_text("x\n")
    (src / "file-to-dir").write_text("f\n")
    os.symlink("pkg1", src / "link")
    monkeypatch.setenv("GPUJOB_LOCAL_ROOT", str(tmp_path / "remote-root"))
    code = tmp_path / "remote-root" / "projects" / "proj" / "code"
    agent = agent_for("local")
    settle(src)
    sync_job(agent, spec_for(src), "proj")
    settle(code)
    assert sync_job(agent, spec_for(src), "proj").files_sent == 0

    f = src / "pkg1" / "module_with_a_long_name_1.py"
    f.write_text(f.read_text().replace("x", "y"))  # same size
    (src / "pkg2" / "module_with_a_long_name_2.py").unlink()
    (src / "pkg9" / "new.py").write_text("new\n")
    (src / "new dir" / "deep").mkdir(parents=True)
    (src / "new dir" / "deep" / "n.py").write_text("n\n")
    (src / "run.log").write_text("ignored\n")
    (src / "build").mkdir()
    (src / "build" / "out.py").write_text("ignored too\n")
    (src / "dir-to-file" / "x.py").unlink()
    (src / "dir-to-file").rmdir()
    (src / "dir-to-file").write_text("now a file\n")
    (src / "file-to-dir").unlink()
    (src / "file-to-dir").mkdir()
    (src / "file-to-dir" / "y.py").write_text("y\n")
    (src / "link").unlink()
    os.symlink("pkg3", src / "link")
    (src / "pkg4" / "module_with_a_long_name_4.py").chmod(0o755)
    settle(src)
    rep = sync_job(agent, spec_for(src), "proj")
    d = subprocess.run(["diff", "-r", "--no-dereference", "-x", "*.log", "-x", "build", str(src), str(code)],
                       capture_output=True, text=True)
    assert d.stdout + d.stderr == ""
    assert not (code / "run.log").exists() and not (code / "build").exists()
    assert os.access(code / "pkg4" / "module_with_a_long_name_4.py", os.X_OK)
    assert (rep.files_sent, rep.deleted) == (7, 2), rep

    # an ignore file changed: every name may be in or out now
    (src / ".gitignore").write_text("*.log\n")
    settle(src)
    sync_job(agent, spec_for(src), "proj")
    assert (code / "build" / "out.py").exists() and not (code / "run.log").exists()
    settle(code)
    assert sync_job(agent, spec_for(src), "proj").files_sent == 0
