"""A ``data:`` source inside the workdir crosses the wire once and is stored once (never also code),
and the script still opens it at its path there; ``pull --include`` reaches every file of the job
(TensorBoard event files wherever the script wrote them), never its secrets. Over a real sshd."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

from remote.data.pathglob import literal, matcher, tops
from remote.data.pullselect import appended_only
from remote.metrics.tfevents import masked_crc
from tests.conftest import run_cli
from tests.helpers import wait_state

RANDOM = 4_000_000  # the data file's random tail: what the wire carries of it (the rest is zeros)
SIZE = 51_000_000  # over the 50 MB a code file is warned about

SCRIPT = """
import hashlib, os
print("sha", hashlib.sha256(open("data/train.bin", "rb").read()).hexdigest(), flush=True)
event = bytes.fromhex("{event}")
for folder in (os.environ["GPUJOB_TB_DIR"], os.path.join(os.environ["GPUJOB_CKPT_DIR"], "runs", "Dec07"),
               os.path.join("outputs", "runs", "Dec07")):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "events.out.tfevents.1.box"), "wb") as f:
        f.write(event)
"""


def _event_file() -> bytes:
    """A TensorBoard event file holding its first record (brain.Event:2), as every writer starts one."""
    data = b"\x09" + struct.pack("<d", 1.0) + b"\x1a\x0dbrain.Event:2"
    head = struct.pack("<Q", len(data))
    return head + struct.pack("<I", masked_crc(head)) + data + struct.pack("<I", masked_crc(data))


def _cli(*args: str) -> dict:
    r = run_cli(*args, "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


def _files(top: Path) -> list[str]:
    return sorted(p.relative_to(top).as_posix() for p in top.rglob("*") if p.is_file())


def test_a_data_file_in_the_workdir_is_sent_and_stored_once_and_pull_include_reaches_event_files(
        ssh_host: str, tmp_path: Path, monkeypatch) -> None:
    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    (proj / "main.py").write_text(SCRIPT.format(event=_event_file().hex()))
    tail = os.urandom(RANDOM)
    with open(proj / "data" / "train.bin", "wb") as f:  # sparse zeros, then random bytes
        f.seek(SIZE - RANDOM)
        f.write(tail)
    want = hashlib.sha256(b"\0" * (SIZE - RANDOM) + tail).hexdigest()
    monkeypatch.setenv("DATA_ONCE_TOKEN", "s3cr3t-value")
    (proj / "job.yaml").write_text("name: once\nrun: python main.py\nsecrets: [DATA_ONCE_TOKEN]\n"
                                   "data:\n  - src: ./data/train.bin\n")

    r = run_cli("submit", str(proj / "job.yaml"), "--host", ssh_host, "--json")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr  # no "move it to a data: entry"
    res = json.loads(r.stdout)
    sync = res["sync"]
    assert sync["as_data"] == [{"path": "data/train.bin", "bytes": SIZE}], sync
    assert SIZE <= sync["bytes_sent"] < SIZE + 100_000, sync  # once: twice was 2 x SIZE
    assert RANDOM <= sync["wire_bytes"] < 1.5 * RANDOM, sync
    jid = res["job_id"]
    wait_state(ssh_host, jid, ("succeeded",))
    root = tmp_path / "remote-root"
    job = root / "jobs" / jid
    assert f"sha {want}" in (job / "output.log").read_text()  # data/train.bin, opened where it was here
    assert os.readlink(job / "code" / "data" / "train.bin") == "../../data/train.bin"
    stored = {(st.st_dev, st.st_ino) for p in root.rglob("*") if p.is_file() and not p.is_symlink()
              and (st := p.stat()).st_size == SIZE}
    assert len(stored) == 1, stored  # one copy on the host's disk (its store, linked into the views)

    # every event file of the job, wherever the script wrote it, and nothing else
    got = _cli("pull", jid, str(tmp_path / "ev"), "--include", "*tfevents*")
    assert _files(Path(got["dest"])) == ["ckpt/runs/Dec07/events.out.tfevents.1.box",
                                         "code/outputs/runs/Dec07/events.out.tfevents.1.box",
                                         "tb/events.out.tfevents.1.box"], got
    assert (Path(got["dest"]) / "tb" / "events.out.tfevents.1.box").read_bytes() == _event_file()
    assert (job / "secrets.json").is_file()
    got = _cli("pull", jid, str(tmp_path / "tb"), "--include", "tb/", "--include", "secrets.json")
    assert _files(Path(got["dest"])) == ["tb/events.out.tfevents.1.box"], got  # the secrets never travel

    # the same submit again: nothing travels, and the summary says what is not code and why
    r = run_cli("submit", str(proj / "job.yaml"), "--host", ssh_host)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    said = " ".join(r.stdout.split())
    assert "synced 0 file(s), 0.0 MB" in said and \
        "left out of code: data/train.bin (51.0 MB) — sent as data: (once)" in said, said
    wait_state(ssh_host, said.split()[0], ("succeeded",))


def test_include_globs_mean_what_they_mean_in_gitignore() -> None:
    cases = {
        "*tfevents*": ["tb/events.out.tfevents.1", "code/outputs/runs/x/events.out.tfevents.2"],
        "tb/*": ["tb/e", "tb/sub/e"],  # a folder that matches brings what is under it
        "tb/": ["tb/e"], "tb": ["tb/e", "code/tb/e"], "**/runs": ["code/outputs/runs/e", "runs/e"],
        "code/**/e": ["code/e", "code/a/b/e"], "ckpt/*.pt": ["ckpt/a.pt"], "/output.log": ["output.log"],
        "[!b].txt": ["x/a.txt"],
    }
    misses = {
        "*tfevents*": ["output.log"], "tb/": ["code/tb", "x/tb"], "ckpt/*.pt": ["ckpt/a/b.pt"],
        "/output.log": ["code/output.log"], "[!b].txt": ["b.txt"], "?.txt": ["ab.txt"], "code/**/e": ["code/ee"],
    }
    assert [(g, rel) for g, rels in cases.items() for rel in rels if not matcher([g])(rel)] == []
    assert [(g, rel) for g, rels in misses.items() for rel in rels if matcher([g])(rel)] == []
    assert matcher([literal("code/model[1]*.bin")])("code/model[1]*.bin") and not matcher([literal("a?")])("ab")
    assert tops(["code/outputs/*", "/tb"]) == {"code", "tb"} and tops(["code/x", "*.log"]) is None  # what is walked
    # an event file only grows, as a log does: a pull takes it as it is, never waiting for its writer
    assert appended_only("code/runs/Dec07/events.out.tfevents.1.box") and appended_only("output.log")
    assert not appended_only("ckpt/model.pt") and not appended_only("code/tfevents.py")
