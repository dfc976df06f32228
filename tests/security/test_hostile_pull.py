"""A hostile program in place of the agent cannot make ``pull`` write, follow or delete anything
outside DEST: a job id that is a path, a chain of links that later leads a temporary name out,
a link and then a file of the same name, and more data than the manifest announced. Each is
refused with exit 3 (the host is at fault) and no traceback; nothing outside DEST changes.
The program is put where the agent's interpreter is recorded, so ``send`` runs it for real.

A malicious or merely odd instance: crafted pull streams, links into the job, and nine pulls
into one folder at once."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpujob.usecases.sync.pull import extract, wire
from tests.conftest import REPO
from tests.helpers import submit, wait_state, write_job
from tests.hostile import install_hostile
from tests.security.test_hostile_agent import MiB, _cli

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


def stream(*entries: list) -> io.BytesIO:
    """One batch of folder and link entries, then the end record."""
    return io.BytesIO(wire.MAGIC + wire.frame(b"B", list(entries)) + wire.frame(b"E", {}))


def outside(dest: Path) -> list[str]:
    """Links under ``dest`` that resolve outside it."""
    root = os.path.realpath(dest)
    return [str(p) for p in dest.rglob("*") if p.is_symlink()
            and not (os.path.realpath(p) + "/").startswith(root + "/")]


def test_a_chain_of_links_cannot_lead_out(tmp_path: Path) -> None:
    dest = tmp_path / "a" / "b" / "c" / "dest"
    deep = "/".join(f"d{i}" for i in range(1, 13))
    dirs = [["d", "/".join(deep.split("/")[:i]), 0o755] for i in range(1, 13)]
    evil = stream(*dirs, ["l", f"{deep}/up", "../../.."], ["l", "z", f"{deep}/up/" + "../" * 13 + "etc"],
                  ["f", "ok.txt", 0o644, 0, 2, wire.small_hash(b"ok")])
    data = evil.getvalue()
    evil = io.BytesIO(data[: -len(wire.frame(b"E", {}))] + b"ok" + wire.frame(b"E", {}))
    res = extract(evil, dest)
    assert not os.path.lexists(dest / "z") and outside(dest) == []
    assert any(s.startswith("z -> ") for s in res["skipped"])
    assert (dest / "ok.txt").read_text() == "ok"  # not fatal: the rest arrived
    assert os.readlink(dest / deep / "up") == "../../.."  # inside: kept


def test_a_later_link_cannot_redirect_an_earlier_one_out(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    res = extract(stream(["d", "d1", 0o755], ["d", "d1/d2", 0o755], ["d", "d1/d2/d3", 0o755],
                         ["l", "d1/d2/d3/b", "x/../.."], ["l", "d1/d2/d3/x", "../../.."]), dest)
    assert outside(dest) == [] and not os.path.lexists(dest / "d1/d2/d3/b")
    assert os.readlink(dest / "d1/d2/d3/x") == "../../.." and res["skipped"]


LINKS_JOB = """
import os
from pathlib import Path
ck = Path(os.environ["GPUJOB_CKPT_DIR"])
(ck / "step-1").mkdir()
(ck / "step-1" / "w.bin").write_bytes(b"w" * 1000)
(ck / "step-1" / ".gpujob-complete").write_text("")
os.symlink(str((ck / "step-1").resolve()), ck / "latest")
os.symlink(".", ck / "x")
os.symlink("/etc", ck / "escape")
print("done")
"""


def pull_cli(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "gpujob.cli", "pull", *args, "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)


def test_links_inside_the_job_arrive_relative_and_one_out_is_skipped(tmp_path: Path) -> None:
    job_id = submit("local", write_job(tmp_path, "links", LINKS_JOB, "python main.py"))["job_id"]
    assert wait_state("local", job_id, ("succeeded", "failed"))["state"] == "succeeded"
    p = pull_cli(job_id, str(tmp_path / "p"))
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    got = Path(json.loads(out)["dest"]) / "ckpt"
    assert os.readlink(got / "latest") == "step-1" and (got / "latest" / "w.bin").read_bytes() == b"w" * 1000
    assert os.readlink(got / "x") == "."
    assert not os.path.lexists(got / "escape")
    assert "escape -> /etc" in err and "not kept" in err and "Traceback" not in err


BIG_JOB = """
import os
from pathlib import Path
ck = Path(os.environ["GPUJOB_CKPT_DIR"]) / "step-1"
ck.mkdir()
(ck / "model.bin").write_bytes(os.urandom(3 * 4 * 1024 * 1024 + 123))
(ck / ".gpujob-complete").write_text("")
"""


def test_nine_concurrent_pulls_into_one_folder(tmp_path: Path) -> None:
    job_id = submit("local", write_job(tmp_path, "big", BIG_JOB, "python main.py"))["job_id"]
    assert wait_state("local", job_id, ("succeeded", "failed"))["state"] == "succeeded"
    dest = tmp_path / "shared"
    procs = [pull_cli(job_id, str(dest)) for _ in range(9)]
    results = [(p.wait(240), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    assert all(rc == 0 for rc, _, _ in results), [r for r in results if r[0]]
    src = tmp_path / "local-root" / "jobs" / job_id / "ckpt" / "step-1" / "model.bin"
    assert (dest / job_id / "ckpt" / "step-1" / "model.bin").read_bytes() == src.read_bytes()
    assert not list(dest.rglob("*.gpujob-part*"))
    assert any("another pull into" in err for _, _, err in results)
