"""Change detection and temporary names (issue 14, failures 6 and 7): an edit that keeps the
size within the same second is sent, a file changing while it is read is never sent torn,
and names up to NAME_MAX bytes sync, resume and pull."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpujob.errors import GpujobError
from gpujob.usecases.sync.pull import extract
from gpujob.usecases.sync.upload import stream, sync_job
from tests.gpujob.usecases.test_sync import agent_for, diff, spec_for

T0 = 1_700_000_000 * 10**9  # a whole second, long ago


def test_same_size_edit_within_one_second_is_sent(ssh_host: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    f = src / "train.py"
    code = tmp_path / "remote-root" / "projects" / "proj" / "code" / "train.py"
    agent = agent_for(ssh_host)

    f.write_text("lr = 1\n")
    os.utime(f, ns=(T0 + 100_000_000, T0 + 100_000_000))
    sync_job(agent, spec_for(src), "proj")
    assert code.read_text() == "lr = 1\n"

    # same size, same whole second, 600 ms later
    f.write_text("lr = 2\n")
    os.utime(f, ns=(T0 + 700_000_000, T0 + 700_000_000))
    rep = sync_job(agent, spec_for(src), "proj")
    assert code.read_text() == "lr = 2\n" and rep.files_sent == 1

    # same size and the very same mtime_ns (an edit in one clock tick, or a tool restoring the
    # mtime): the changed ctime sends it
    f.write_text("lr = 3\n")
    os.utime(f, ns=(T0 + 700_000_000, T0 + 700_000_000))
    rep = sync_job(agent, spec_for(src), "proj")
    assert code.read_text() == "lr = 3\n" and rep.files_sent == 1

    # and nothing is sent when nothing changed
    assert sync_job(agent, spec_for(src), "proj").files_sent == 0


WRITER = """
import os, sys
path, size = sys.argv[1], int(sys.argv[2])
a, b = b"a" * size, b"b" * size
fd = os.open(path, os.O_WRONLY)
open(path + ".started", "w").close()
while not os.path.exists(path + ".stop"):
    for data in (a, b):
        os.pwrite(fd, data, 0)
"""


def test_a_file_changing_while_read_is_reported_not_sent_torn(ssh_host: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    big = src / "weights.bin"
    size = 24 << 20
    big.write_bytes(b"a" * size)
    agent = agent_for(ssh_host)
    agent.call("hello")
    w = subprocess.Popen([sys.executable, "-c", WRITER, str(big), str(size)])
    try:
        deadline = time.time() + 30
        while not Path(str(big) + ".started").exists() and time.time() < deadline:
            time.sleep(0.02)
        with pytest.raises(GpujobError, match="changed while being sent"):
            sync_job(agent, spec_for(src), "proj")
    finally:
        Path(str(big) + ".stop").touch()
        w.wait(30)
    for p in (".started", ".stop"):
        Path(str(big) + p).unlink()
    code = tmp_path / "remote-root" / "projects" / "proj" / "code"
    assert not (code / "weights.bin").exists()  # nothing torn under the real name
    sync_job(agent, spec_for(src), "proj")
    assert (code / "weights.bin").read_bytes() == big.read_bytes()


def long_names_tree(top: Path) -> dict[str, bytes]:
    """Names of 244 to 255 bytes (some of them multi-byte), small and large files, a folder, a link."""
    files = {
        "s" * 244: b"small 244\n",
        "é" * 127 + "x": b"small 255 bytes of utf-8\n",
        "d" * 255 + "/" + "f" * 255: b"in a long folder\n",
        "L" * 250 + ".bin": os.urandom(stream.CHUNK + 12345),
    }
    for rel, data in files.items():
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_bytes(data)
    os.symlink("s" * 244, top / ("k" * 255))
    return files


def test_names_up_to_name_max_sync(ssh_host: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    long_names_tree(src)
    agent = agent_for(ssh_host)
    rep = sync_job(agent, spec_for(src), "proj")
    code = tmp_path / "remote-root" / "projects" / "proj" / "code"
    assert diff(src, code) == "" and rep.files_sent >= 5
    assert not [p for p in code.rglob("*") if stream.is_tmp_name(p.name)]
    assert sync_job(agent, spec_for(src), "proj").files_sent == 0


def test_names_up_to_name_max_pull_and_resume(tmp_path: Path) -> None:
    src = tmp_path / "job"
    src.mkdir()
    files = long_names_tree(src)
    items = []
    for rel in sorted(files):
        st = (src / rel).stat()
        items.append(stream.Item("ckpt/" + rel, src / rel, st.st_size, st.st_mtime_ns, 0o644))
    buf = io.BytesIO()
    stream.write_items(buf, items)
    whole = buf.getvalue()
    dest = tmp_path / "dest"
    big = "L" * 250 + ".bin"
    cut = whole.index(files[big][: 1 << 10]) + stream.CHUNK + 100  # inside the large file, past its first chunk
    with pytest.raises(GpujobError):
        extract(io.BytesIO(whole[:cut]), dest)
    # the cut large file is listed under its final name, with its verified chunk
    parts = stream.tree(dest / "ckpt")["parts"]
    assert list(parts) == [big] and len(parts[big]) == 1
    st = (src / big).stat()
    resumed = io.BytesIO()
    stream.write_items(resumed, [stream.Item("ckpt/" + big, src / big, st.st_size, st.st_mtime_ns, 0o644,
                                             prefix=parts[big])])
    extract(io.BytesIO(resumed.getvalue()), dest)
    extract(io.BytesIO(whole), dest)
    for rel, data in files.items():
        assert (dest / "ckpt" / rel).read_bytes() == data
    assert (dest / "ckpt" / big).stat().st_mtime_ns == st.st_mtime_ns  # nanoseconds kept
    assert not [p for p in dest.rglob("*") if stream.is_tmp_name(p.name)]
