"""A checkpoint saved again under its name (nanoGPT's ``ckpt.pt``, an HF ``checkpoint-last`` folder) is
a new version on the mirror: uploaded and marked by content, shown as such by status, and what a pull
from the mirror delivers and keeps is compared by content, never by name (a real ``rclone serve s3``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import needs, remote_root, wait_for, wait_state, write_job
from tests.mirror_lab import S3, s3_server


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[S3]:
    with s3_server(tmp_path) as server:
        yield server


# nanoGPT's loop: one out/ckpt.pt saved again and again, by temp file + rename and by a plain
# torch.save over the name; after each save it waits for the test's gate (the mirror has that version)
NANO = """
    import os, time, torch
    model = torch.nn.Linear(64, 64)
    os.makedirs("out", exist_ok=True)
    path = os.path.join("out", "ckpt.pt")
    for it in range(1, 4):
        model.weight.data += 1.0
        state = {"model": model.state_dict(), "iter_num": it}
        if it == 2:
            torch.save(state, path + ".tmp")
            os.replace(path + ".tmp", path)
        else:
            torch.save(state, path)
        print("saved", it, flush=True)
        while it < 3 and not os.path.exists("go-%d" % it):
            time.sleep(0.05)
"""


def marker(on_store: Path, name: str) -> dict:
    p = on_store / ".complete" / f"{name}.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_checkpoint_saved_in_place_is_mirrored_pulled_and_kept_by_content(s3: S3, tmp_path: Path) -> None:
    needs("torch")
    import torch

    job = write_job(tmp_path, "nanomirror", NANO, "python main.py",
                    checkpoint={"dir": "out", "backup": False, "mirror": {"to": "s3://ckpts/n", "endpoint": s3.url}},
                    secrets=["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"])
    r = run_cli("submit", str(job), "--host", "local", "--json", env_extra=s3.env())
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    jd = remote_root(tmp_path, "local") / "jobs" / job_id
    on_store = s3.root / "ckpts" / "n" / job_id
    local = jd / "ckpt" / "ckpt.pt"
    pulls = tmp_path / "pulls"
    try:
        for it in (1, 2):
            def marked(it: int = it) -> bool:  # the store holds, under a marker, the version on the disk now
                m = marker(on_store, "ckpt.pt")
                stored = on_store / m.get("path", "ckpt.pt")
                return f"saved {it}" in (jd / "output.log").read_text() and bool(m) and stored.is_file() \
                    and sha(stored) == sha(local)
            wait_for(marked, 60, lambda it=it: f"ckpt.pt of iter {it} marked on the mirror: {marker(on_store, 'ckpt.pt')}")
            if it == 1:  # an older pull in DEST: the next pull must replace it, not call it 'already here'
                r = run_cli("pull", job_id, str(pulls), "--latest", "--from", "mirror", "--json", env_extra=s3.env())
                assert r.returncode == 0, r.stderr + r.stdout
                assert torch.load(pulls / job_id / "ckpt" / "ckpt.pt")["iter_num"] == 1
            (jd / "code" / f"go-{it}").write_text("")
        st = wait_state("local", job_id, ("succeeded", "failed"), 120)
        assert st["state"] == "succeeded", st
        wait_for(lambda: '"mirror_done"' in (jd / "events.jsonl").read_text(), 60, "mirror_done")
    finally:
        run_cli("stop", job_id, "--host", "local")
    # the store holds the last save, where its marker says, and the marker names it by content
    m = marker(on_store, "ckpt.pt")
    stored = on_store / m["path"]
    assert sha(stored) == sha(local) == m["files"]["ckpt.pt"]["sha256"]
    assert torch.load(stored)["iter_num"] == 3
    assert len([p for p in on_store.rglob("ckpt.pt")]) == 1  # the earlier versions' slot is gone
    # status: mirrored, lag 0, and the version is the one on the disk
    doc = json.loads(run_cli("status", job_id, "--host", "local", "--json").stdout)
    assert doc["mirror"]["lag_s"] == 0 and doc["mirror"]["targets"][0]["mirrored_version"] == m["version"], doc["mirror"]
    # the pull into the folder holding iter 1 replaces it with iter 3
    r = run_cli("pull", job_id, str(pulls), "--latest", "--from", "mirror", "--json", env_extra=s3.env())
    assert r.returncode == 0, r.stderr + r.stdout
    got = json.loads(r.stdout)
    assert got["files"] == 1 and got["unchanged"] == 0, got
    assert torch.load(pulls / job_id / "ckpt" / "ckpt.pt")["iter_num"] == 3
    # again: now it is the same content, so nothing is fetched
    again = json.loads(run_cli("pull", job_id, str(pulls), "--latest", "--from", "mirror", "--json",
                               env_extra=s3.env()).stdout)
    assert again["files"] == 0 and again["unchanged"] == 1, again
    # a stale object under a fresh marker (an earlier save), a cut one, a swapped one: never delivered
    good = stored.read_bytes()
    first = (pulls / job_id / "ckpt" / "ckpt.pt").read_bytes()
    older = tmp_path / "older"
    (older / job_id / "ckpt").mkdir(parents=True)
    for bad in (torch_of_iter(tmp_path, 1), good[: len(good) // 2], os.urandom(len(good))):
        stored.write_bytes(bad)
        (older / job_id / "ckpt" / "ckpt.pt").write_bytes(first[:100])  # what DEST held stays as it was
        for dest in (older, tmp_path / f"fresh-{len(bad)}"):
            r = run_cli("pull", job_id, str(dest), "--latest", "--from", "mirror", env_extra=s3.env())
            assert r.returncode != 0 and "not the version its marker names" in r.stderr, r.stderr + r.stdout
            assert "Traceback" not in r.stderr
        assert (older / job_id / "ckpt" / "ckpt.pt").read_bytes() == first[:100]
        assert not (tmp_path / f"fresh-{len(bad)}" / job_id / "ckpt" / "ckpt.pt").exists()
    stored.write_bytes(good)
    r = run_cli("pull", job_id, str(older), "--latest", "--from", "mirror", "--json", env_extra=s3.env())
    assert r.returncode == 0 and torch.load(older / job_id / "ckpt" / "ckpt.pt")["iter_num"] == 3, r.stderr


def torch_of_iter(tmp_path: Path, it: int) -> bytes:
    import torch

    p = tmp_path / f"iter{it}.pt"
    torch.save({"iter_num": it}, p)
    return p.read_bytes()


def test_a_folder_saved_again_goes_to_the_other_slot_and_the_earlier_stays_whole_until_marked(
        s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An HF ``checkpoint-last`` folder saved again with fewer files: the new version is uploaded beside
    the marked one, the marker switches, the earlier slot goes, and a fetch holds exactly the new files."""
    from types import SimpleNamespace

    from gpujob.usecases.sync import mirror as laptop
    from remote.mirror import engine, store, version
    from remote.run.mirror import Mirror

    ck = tmp_path / "job" / "ckpt" / "checkpoint-last"
    ck.mkdir(parents=True)
    for n in ("model.safetensors", "optimizer.pt", "extra.bin"):
        (ck / n).write_bytes(os.urandom(4096))
    cfg = {"targets": ["s3://ckpts/f"], "endpoint": s3.url, "keep": 2}
    events: list[tuple] = []
    job = SimpleNamespace(id="job1", ckpt=tmp_path / "job" / "ckpt", path=tmp_path / "job",
                          secrets_data=lambda: s3.env(), event=lambda *a, **k: events.append((a, k)))
    sup = SimpleNamespace(job=job, root=SimpleNamespace(root=tmp_path), spec={}, path_prefix=lambda: "",
                          ckpt_dir=lambda: job.ckpt)
    m = Mirror(sup, cfg)
    m.rclone = lambda: shutil.which("rclone") or "rclone"  # type: ignore[method-assign]
    t = m.targets[0]
    c = SimpleNamespace(path=ck, is_dir=True, step=None, kind="hf", complete=True, mtime=ck.stat().st_mtime,
                        rel=lambda base: "checkpoint-last")
    assert m.ready(t) and t.pending([c], job.ckpt) == [c]
    assert m.upload(t, c) and t.pending([c], job.ckpt) == []
    on_store = s3.root / "ckpts" / "f" / "job1"
    first = marker(on_store, "checkpoint-last")
    assert first["path"] == "checkpoint-last"
    # saved again, with one file fewer: pending by content though the name is on the mirror
    (ck / "extra.bin").unlink()
    (ck / "model.safetensors").write_bytes(os.urandom(4096))
    assert t.pending([c], job.ckpt) == [c]
    assert m.upload(t, c)
    second = marker(on_store, "checkpoint-last")
    assert second["path"] == ".versions/checkpoint-last" and second["version"] != first["version"]
    assert sorted(p.name for p in (on_store / second["path"]).iterdir()) == ["model.safetensors", "optimizer.pt"]
    assert not (on_store / "checkpoint-last").exists()  # the earlier slot went once the marker switched
    assert version.mismatch(on_store / second["path"], True, second["files"]) == ""
    for k, v in s3.env().items():  # the laptop reads the store with this shell's credentials
        monkeypatch.setenv(k, v)
    # the laptop: a folder of the earlier version in DEST is replaced by exactly the new files
    dest = tmp_path / "dest"
    old = dest / "job1" / "ckpt" / "checkpoint-last"
    old.mkdir(parents=True)
    (old / "extra.bin").write_bytes(b"old")
    got = laptop.fetch("job1", dest, cfg=cfg, record=False)
    assert got["files"] == 2 and sorted(p.name for p in old.iterdir()) == ["model.safetensors", "optimizer.pt"]
    assert (old / "model.safetensors").read_bytes() == (ck / "model.safetensors").read_bytes()
    assert engine.dest("s3://ckpts/f", "job1").endswith("job1") and store.slots("x") == ["x", ".versions/x"]


def test_pull_follow_fetches_and_names_each_version_of_a_checkpoint_saved_in_place(tmp_path: Path) -> None:
    """``pull --follow`` (the laptop as a mirror): each save of ``ckpt.pt`` arrives and is named once per
    version (it was named once for all: "pulled ckpt/ckpt.pt", then silence while new versions came)."""
    needs("torch")
    import subprocess
    import sys

    import torch

    from tests.conftest import REPO

    job = write_job(tmp_path, "nanofollow", NANO, "python main.py", checkpoint={"dir": "out", "backup": False})
    r = run_cli("submit", str(job), "--host", "local", "--json")
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    jd = remote_root(tmp_path, "local") / "jobs" / job_id
    dest = tmp_path / "follow"
    p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "pull", job_id, str(dest), "--follow", "0.3", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    here = dest / job_id / "ckpt" / "ckpt.pt"

    def iter_here() -> int | None:
        try:
            return torch.load(here)["iter_num"]
        except Exception:  # noqa: BLE001 - not here yet, or being replaced
            return None
    try:
        for it in (1, 2):
            wait_for(lambda it=it: iter_here() == it, 60, lambda it=it: f"iter {it} pulled: {iter_here()}")
            (jd / "code" / f"go-{it}").write_text("")
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
        run_cli("stop", job_id, "--host", "local")
    assert p.returncode == 0, err + out
    res = json.loads(out)
    assert res["state"] == "succeeded" and iter_here() == 3, res
    assert res["pulled"] == ["ckpt/ckpt.pt"] * 3, res
