"""The job index lives in the state folder and the hash cache in the cache folder (XDG), moved
there once from the config folder where older versions kept them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import run_cli


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    dirs = {k: tmp_path / k for k in ("config", "state", "cache")}
    for k in ("GPUJOB_CONFIG_DIR", "GPUJOB_STATE_DIR", "GPUJOB_CACHE_DIR"):
        monkeypatch.delenv(k)
    for k, d in dirs.items():
        monkeypatch.setenv(f"XDG_{k.upper()}_HOME", str(d))
    return {k: d / "gpujob" for k, d in dirs.items()}


def test_old_index_and_hash_cache_move_once(xdg: dict[str, Path]) -> None:
    xdg["config"].mkdir(parents=True)
    line = json.dumps({"job_id": "old-11300000-abcde", "host": "local", "name": "old", "t": 1.0}) + "\n"
    (xdg["config"] / "jobs.jsonl").write_text(line)
    (xdg["config"] / "sync-hashes.json").write_text('{"v": 1}')
    r = run_cli("completion", "--words", "jobs")  # reads the index, contacts no host
    assert r.returncode == 0, r.stderr
    assert "old-11300000-abcde" in r.stdout.split()
    assert (xdg["state"] / "jobs.jsonl").read_text() == line
    assert not (xdg["config"] / "jobs.jsonl").exists()
    # the old hash cache is not read any more (the sync records replaced it); they live in the cache folder
    from gpujob.usecases.sync.tree import Record

    rec = Record.for_tree("127.0.0.1:22", "projects/p/code")
    assert rec.path is not None and rec.path.is_relative_to(xdg["cache"])


def test_new_index_wins_and_the_old_one_is_kept(xdg: dict[str, Path]) -> None:
    xdg["config"].mkdir(parents=True)
    xdg["state"].mkdir(parents=True)
    (xdg["config"] / "jobs.jsonl").write_text("old\n")
    (xdg["state"] / "jobs.jsonl").write_text("new\n")
    from gpujob.config import index

    assert index._path() == xdg["state"] / "jobs.jsonl"
    assert (xdg["state"] / "jobs.jsonl").read_text() == "new\n"
    assert (xdg["config"] / "jobs.jsonl").read_text() == "old\n"


def test_overrides_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpujob.config.paths import cache_dir, state_dir

    monkeypatch.setenv("GPUJOB_STATE_DIR", str(tmp_path / "s"))
    monkeypatch.setenv("GPUJOB_CACHE_DIR", str(tmp_path / "c"))
    assert state_dir() == tmp_path / "s" and cache_dir() == tmp_path / "c"


def test_move_across_file_systems(xdg: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Config on another file system than state (here /dev/shm, a tmpfs): copied, fsynced, renamed, then removed."""
    import shutil
    import tempfile

    if not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on a file system of its own")
    other = Path(tempfile.mkdtemp(prefix="gjcfg", dir="/dev/shm"))
    try:
        monkeypatch.setenv("XDG_CONFIG_HOME", str(other))
        (other / "gpujob").mkdir()
        (other / "gpujob" / "jobs.jsonl").write_text("line\n")
        from gpujob.config import index

        assert index._path() == xdg["state"] / "jobs.jsonl"
        assert (xdg["state"] / "jobs.jsonl").read_text() == "line\n"
        assert not (other / "gpujob" / "jobs.jsonl").exists()
        assert [p.name for p in xdg["state"].iterdir()] == ["jobs.jsonl"]  # no temporary copy left
    finally:
        shutil.rmtree(other, ignore_errors=True)
