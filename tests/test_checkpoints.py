"""remote/checkpoints.py: completeness rules for both layouts, listing, rotation."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "remote"))
import checkpoints as ck  # noqa: E402


def hf(d: Path, step: int, complete: bool = True, rng: list[str] | None = None, incomplete_flag: bool = False) -> Path:
    p = d / f"checkpoint-{step}"
    p.mkdir(parents=True)
    (p / "model.safetensors").write_bytes(b"x")
    for name in (rng if rng is not None else ["rng_state.pth"]):
        (p / name).write_bytes(b"r")
    if complete:
        (p / "trainer_state.json").write_text("{}")
    if incomplete_flag:
        (p / "checkpoint-is-incomplete.txt").write_text("")
    return p


def own(d: Path, step: int, complete: bool = True) -> Path:
    p = d / f"step-{step}"
    p.mkdir(parents=True)
    (p / "state.pt").write_bytes(b"s")
    if complete:
        (p / ck.COMPLETE_MARKER).write_text("")
    return p


def test_hf_completeness(tmp_path: Path) -> None:
    assert ck.is_complete(hf(tmp_path, 1))
    assert not ck.is_complete(hf(tmp_path, 2, complete=False))           # no trainer_state.json
    assert not ck.is_complete(hf(tmp_path, 3, rng=[]))                    # no rng file
    assert not ck.is_complete(hf(tmp_path, 4, incomplete_flag=True))
    assert ck.is_complete(hf(tmp_path, 5, rng=["rng_state_0.pth", "rng_state_1.pth"]))
    gap = hf(tmp_path, 6, rng=["rng_state_0.pth", "rng_state_2.pth"])
    assert not ck.is_complete(gap)                                        # rank 1 missing
    two = hf(tmp_path, 7, rng=["rng_state_0.pth", "rng_state_1.pth"])
    assert ck.is_complete(two, world_size=2) and not ck.is_complete(two, world_size=4)
    assert not ck.is_complete(tmp_path / "checkpoint-99")


def test_own_layout_and_listing(tmp_path: Path) -> None:
    own(tmp_path, 10)
    own(tmp_path, 20, complete=False)
    hf(tmp_path, 5)
    (tmp_path / ".tmp-step-30").mkdir()
    (tmp_path / "best").mkdir()
    (tmp_path / "step-x").mkdir()
    (tmp_path / "step-40").write_text("a file, not a folder")
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["checkpoint-5", "step-10", "step-20"]
    assert ck.latest_complete(tmp_path).name == "step-10"                 # step-20 has no marker
    assert ck.latest_complete(tmp_path / "nope") is None
    assert ck.list_checkpoints(tmp_path / "nope") == []


def test_rotation_keeps_newest_complete(tmp_path: Path) -> None:
    for s in (1, 2, 3, 4, 5):
        own(tmp_path, s)
    own(tmp_path, 6, complete=False)   # being written: newer than the newest complete, kept
    hf(tmp_path, 0, complete=False)    # half-written and old: deleted
    (tmp_path / ".tmp-step-3").mkdir() # stale tmp older than the newest complete: deleted
    deleted = ck.rotate(tmp_path, keep=2)
    assert sorted(p.name for p in deleted) == [".tmp-step-3", "checkpoint-0", "step-1", "step-2", "step-3"]
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step-4", "step-5", "step-6"]
    ck.rotate(tmp_path, keep=0)        # never below one: the newest complete survives
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step-5", "step-6"]


def test_rotation_without_complete_deletes_nothing(tmp_path: Path) -> None:
    own(tmp_path, 1, complete=False)
    hf(tmp_path, 2, complete=False)
    assert ck.rotate(tmp_path, keep=1) == []
    assert len(ck.list_checkpoints(tmp_path)) == 2


def test_python38_compatible_source() -> None:
    import ast

    src = (Path(ck.__file__)).read_text()
    tree = ast.parse(src, feature_version=(3, 8))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names)
