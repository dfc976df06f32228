"""pull: incremental and verified, --latest / --best / --include, and traversal refused."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from gpujob.errors import GpujobError
from gpujob.usecases.sync.pull import extract, wire
from tests.conftest import run_cli
from tests.helpers import submit, wait_state, write_job

JOB = """
import json, os
from pathlib import Path
ck = Path(os.environ["GPUJOB_CKPT_DIR"])
for step, loss in ((100, 0.9), (200, 0.4), (300, 0.6)):
    d = ck / f"step-{step}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "weights.bin").write_bytes(bytes([step % 256]) * 5000)
    (d / ".gpujob-complete").write_text("")
    with open(os.environ["GPUJOB_METRICS_FILE"], "a") as f:
        f.write(json.dumps({"step": step, "eval_loss": loss, "eval_acc": 1 - loss}) + "\\n")
(ck / "step-400").mkdir()
(ck / "step-400" / "weights.bin").write_bytes(b"partial")
print("done")
"""


def pull(*args: str) -> dict:
    r = run_cli("pull", *args, "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


def test_pull_latest_best_include_and_incremental(tmp_path: Path) -> None:
    res = submit("local", write_job(tmp_path, "ck", JOB, "python main.py"))
    job_id = res["job_id"]
    wait_state("local", job_id, ("succeeded",))
    dest = tmp_path / "pulls"

    latest = pull(job_id, str(dest / "latest"), "--latest")
    got = Path(latest["dest"])
    assert latest["selected"] == "ckpt/step-300"
    assert sorted(p.name for p in (got / "ckpt").iterdir()) == ["step-300"]
    assert (got / "ckpt" / "step-300" / "weights.bin").read_bytes() == bytes([300 % 256]) * 5000
    assert "done" in (got / "output.log").read_text()

    best = pull(job_id, str(dest / "best"), "--best", "eval_loss")
    assert best["selected"] == "ckpt/step-200"
    assert pull(job_id, str(dest / "best2"), "--best", "eval_acc")["selected"] == "ckpt/step-200"
    r = run_cli("pull", job_id, str(dest / "none"), "--best", "no_such_metric")  # the next step names this pull
    assert r.returncode == 2 and f"gpujob pull {job_id} without --best brings every file" in r.stderr, r.stderr

    inc = pull(job_id, str(dest / "inc"), "--include", "ckpt/step-100/*")
    files = sorted(str(p.relative_to(inc["dest"])) for p in Path(inc["dest"]).rglob("*") if p.is_file())
    assert files == ["ckpt/step-100/.gpujob-complete", "ckpt/step-100/weights.bin"]

    # --all, then again: nothing travels the second time (but events.jsonl, which each pull's
    # `pulled` event grows); a changed local file is fetched again
    first = pull(job_id, str(dest / "all"))
    assert first["files"] >= 9
    again = pull(job_id, str(dest / "all"))
    events = Path(first["dest"]) / "events.jsonl"
    assert again["files"] == 1 and again["bytes"] == events.stat().st_size and again["unchanged"] == first["files"] - 1
    assert pull(job_id, str(dest / "all"), "--include", "ckpt/*")["files"] == 0
    w = Path(first["dest"]) / "ckpt" / "step-100" / "weights.bin"
    w.write_bytes(b"damaged")
    third = pull(job_id, str(dest / "all"), "--include", "ckpt/*")
    assert third["files"] == 1 and w.read_bytes() == bytes([100]) * 5000


def test_pull_skips_a_symlink_pointing_out(tmp_path: Path) -> None:
    res = submit("local", write_job(tmp_path, "evil", "print('x')", "python main.py"))
    wait_state("local", res["job_id"], ("succeeded",))
    job_dir = tmp_path / "local-root" / "jobs" / res["job_id"]
    (job_dir / "ckpt").mkdir(exist_ok=True)
    os.symlink("/etc", job_dir / "ckpt" / "escape")
    r = run_cli("pull", res["job_id"], str(tmp_path / "p"), "--json")
    assert r.returncode == 0 and "escape -> /etc not kept" in r.stderr and "outside" in r.stderr
    assert not os.path.lexists(tmp_path / "p" / res["job_id"] / "ckpt" / "escape")
    assert (tmp_path / "p" / res["job_id"] / "output.log").exists()  # the rest arrived


def framed(*entries: tuple[list, bytes]) -> io.BytesIO:
    """A stream of one batch record holding ``entries`` ((entry, payload) pairs), then the end."""
    head = [e for e, _ in entries]
    body = b"".join(d for _, d in entries)
    return io.BytesIO(wire.MAGIC + wire.frame(b"B", head) + body + wire.frame(b"E", {}))


def member(name: str, kind: str = "f", link: str = "", data: bytes = b"x") -> tuple[list, bytes]:
    if kind == "f":
        return ["f", name, 0o644, 0, len(data), wire.small_hash(data)], data
    return [kind, name, link if kind in ("l", "h") else 0o755], b""


@pytest.mark.parametrize("evil", [
    [member("../escape.txt")],
    [member("/tmp/abs-escape.txt")],
    [member("a/../../escape.txt")],
    [member("d", "l", "."), member("d/../../escape.txt")],
    [member("dev", "c")],
    [member("hard", "h", "/etc/passwd")],
])
def test_extract_refuses_traversal(tmp_path: Path, evil: list) -> None:
    dest = tmp_path / "a" / "dest"
    with pytest.raises(GpujobError):
        extract(framed(member("fine.txt", data=b"ok"), *evil), dest)
    assert (dest / "fine.txt").read_text() == "ok"
    assert sorted(p.name for p in tmp_path.rglob("*") if p.name != "d") == ["a", "dest", "fine.txt"]


@pytest.mark.parametrize("target", ["/etc", "../..", "..", "/tmp"])
def test_extract_skips_links_pointing_out(tmp_path: Path, target: str) -> None:
    dest = tmp_path / "a" / "dest"
    res = extract(framed(member("out", "l", target), member("fine.txt", data=b"ok")), dest)
    assert res["skipped"] == [f"out -> {target}"] and not os.path.lexists(dest / "out")
    assert (dest / "fine.txt").read_text() == "ok"


def test_extract_refuses_a_path_through_an_existing_link(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    os.symlink(str(tmp_path), dest / "up")
    with pytest.raises(GpujobError):
        extract(framed(member("up/escape.txt")), dest)
    assert not (tmp_path / "escape.txt").exists()


def test_extract_rejects_a_damaged_file(tmp_path: Path) -> None:
    entry, _ = member("w.bin", data=b"data")
    entry[5] = "0" * 64
    with pytest.raises(GpujobError, match="hash mismatch"):
        extract(framed((entry, b"data")), tmp_path / "d")
    assert not (tmp_path / "d" / "w.bin").exists()


def test_cut_pull_resumes_from_verified_chunks(tmp_path: Path) -> None:
    src = tmp_path / "model.bin"
    src.write_bytes(os.urandom(3 * wire.CHUNK + 1234))
    st = src.stat()

    def stream(prefix: list[str]) -> bytes:
        buf = io.BytesIO()
        wire.write_items(buf, [wire.Item("ckpt/model.bin", src, st.st_size, st.st_mtime_ns, 0o644, prefix=prefix)])
        return buf.getvalue()

    dest = tmp_path / "dest"
    whole = stream([])
    with pytest.raises(GpujobError):
        extract(io.BytesIO(whole[: 2 * wire.CHUNK + 5000]), dest)
    target = dest / "ckpt" / "model.bin"
    assert not target.exists()
    have = wire.part_chunks(target)
    assert len(have) == 2
    res = extract(io.BytesIO(stream(have)), dest)
    assert res["bytes"] == st.st_size - 2 * wire.CHUNK
    assert target.read_bytes() == src.read_bytes()
    assert not wire.part_chunks(target) and not list(dest.rglob("*.gpujob-part*"))
