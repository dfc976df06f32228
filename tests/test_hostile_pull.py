"""A hostile program in place of the agent cannot make ``pull`` write, follow or delete anything
outside DEST: a job id that is a path, a chain of links that later leads a temporary name out,
a link and then a file of the same name, and more data than the manifest announced. Each is
refused with exit 3 (the host is at fault) and no traceback; nothing outside DEST changes.
The program is put where the agent's interpreter is recorded, so ``send`` runs it for real."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.hostile import install_hostile
from tests.test_hostile_agent import MiB, _cli

HOSTILE = r'''#!{python}
import json, sys
from remote.stream.format import MAGIC, frame
from remote.stream.hashing import small_hash
from remote.stream.parts import tmp_stem
mode, victim = open({mode!r}).read().split("\n")[:2]
verb = sys.argv[sys.argv.index("--root") + 2]
out = sys.stdout.buffer
if verb != "send":
    out.write(b"{{}}\n")
    sys.exit(0)

def f(name, data):
    return ["f", name, 0o644, 0, len(data), small_hash(data)]

job_id, files, body = "j-1", {{"x.txt": [2, 0, 0o644, None]}}, [[f("x.txt", b"ok")], b"ok"]
if mode == "dotdot":
    job_id = "../escaped"
elif mode == "absolute":
    job_id = victim
elif mode == "sidecar":  # d -> s/t makes P lead inside while it is checked; d -> . then leads it out
    P = tmp_stem("big.bin") + ".json.tmp"
    body = [[["l", "d", "s/t"], ["l", P, "d/../../victim.txt"], ["l", "d", "."]], b""]
elif mode == "setuid":  # run by whoever pulls: as root, a setuid-root program planted in DEST
    body = [[["f", "tool", 0o4755, 0, 2, small_hash(b"#!")], ["f", "big.bin", 0o6755, 0, 2, small_hash(b"ok")]],
            b"#!ok"]
elif mode == "longname":  # more than NAME_MAX: "broke off, run pull again" (exit 2), forever
    body = [[f("a" * 300, b"ok")], b"ok"]
elif mode == "escape":  # a newline splits every script's file list; the OSC reaches whoever lists DEST
    body = [[f("nl\nname\x1b]0;x\x07.txt", b"ok")], b"ok"]
elif mode == "through":
    body = [[["l", "evil", victim], f("evil", b"pwned")], b"pwned"]
out.write(json.dumps({{"job_id": job_id, "files": files, "dirs": []}}).encode() + b"\n")
out.flush()
sys.stdin.buffer.readline()
if mode == "bomb":  # 512 MiB of zeros in 78 KB of xz (one read of 64 KiB is 430 MiB), the stream's own compression
    import lzma
    c = lzma.LZMACompressor(format=lzma.FORMAT_XZ, preset=0)
    blob = c.compress(MAGIC + frame(b"F", {{"n": "big.bin", "mode": 0o644, "mtime": 0, "size": 1 << 29, "off": 0}}))
    blob += b"".join(c.compress(bytes(1 << 20)) for _ in range(512)) + c.flush()
    out.write(blob)  # in one piece: a read takes 64 KiB of it at once
    out.flush()
    sys.exit(0)
out.write(MAGIC + frame(b"B", body[0]) + body[1])
if mode == "sidecar":
    out.write(frame(b"F", {{"n": "big.bin", "mode": 0o644, "mtime": 0, "size": 5, "off": 0}}) + b"hello")
    out.write(frame(b"V", {{"h": "0" * 64}}))
elif mode == "flood":  # a file never announced, far larger than the manifest's 2 bytes
    out.write(frame(b"F", {{"n": "huge.bin", "mode": 0o644, "mtime": 0, "size": 1 << 40, "off": 0}}))
    block = b"a" * (1 << 20)
    for _ in range(1 << 20):
        out.write(block)
out.write(frame(b"E", {{}}))
out.flush()
'''


GPUJOBS_OWN = ("local-root", "config", "state", "cache", "mode", "dest")


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """The ``local`` host's agent replaced by HOSTILE; returns the file naming its mode."""
    mode = tmp_path / "mode"
    install_hostile(tmp_path, "local-root", HOSTILE.format(python=sys.executable, mode=str(mode)))
    return mode


def _tree(root: Path) -> dict[str, bytes | str]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_symlink() else "")
            for p in sorted(root.rglob("*")) if p.relative_to(root).parts[0] not in GPUJOBS_OWN}


@pytest.mark.parametrize("attack", ["longname", "escape", "dotdot", "absolute", "sidecar", "through", "flood", "setuid", "bomb"])
def test_a_hostile_send_writes_nothing_outside_dest(hostile: Path, tmp_path: Path, attack: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    dest = tmp_path / "dest"
    hostile.write_text(f"{attack}\n{victim if attack != 'absolute' else tmp_path / 'elsewhere'}\n")
    (tmp_path / "elsewhere").mkdir()
    before = _tree(tmp_path)
    r, peak = _cli("pull", "j-1", str(dest), "--host", "local", "--write-wait", "0", env={})
    after = _tree(tmp_path)
    assert after == before, (attack, r.stderr)  # nothing outside DEST was written, made or removed
    assert victim.read_text() == "the user's own file\n"
    assert "Traceback" not in r.stderr, r.stderr
    if attack == "setuid":  # the files arrive, without the set-id bits
        assert r.returncode == 0, r.stderr
        assert [(dest / "j-1" / n).stat().st_mode & 0o7777 for n in ("tool", "big.bin")] == [0o755, 0o755]
        return
    if attack == "through":  # the link is not kept; the file arrives as a file
        assert r.returncode == 0, r.stderr
        assert (dest / "j-1" / "evil").read_text() == "pwned" and not (dest / "j-1" / "evil").is_symlink()
        return
    assert r.returncode == 3, (attack, r.returncode, r.stderr)
    assert peak < 256 * MiB, (attack, peak >> 20)  # the bomb held 880 MiB at once
    assert "the agent on local answered something gpujob cannot read" in r.stderr or "refusing" in r.stderr \
        or "too long for this system" in r.stderr, r.stderr
    assert "run pull again" not in r.stderr and "\x1b" not in r.stderr, r.stderr
