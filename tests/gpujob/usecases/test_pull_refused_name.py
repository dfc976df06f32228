"""One name ``pull`` refuses (a newline in it: it would split every script's file list) costs that
name only: every other file of the checkpoint arrives verified, the refused name is said escaped,
and the exit is non-zero (2: a file left out). The same for ``pull --latest`` and ``pull --follow``;
a ``move`` (host to host, where such a name is only a name) brings it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Sshd, run_cli
from tests.gpujob.usecases.test_move import two_hosts  # noqa: F401  (the fixture: hosts a and b, a real sshd each)
from tests.helpers import submit, wait_for, wait_state, write_job

BAD = "notes\nfor later.txt"
JOB = f"""
import os
from pathlib import Path
ck = Path(os.environ["GPUJOB_CKPT_DIR"])
for step in (100, 200):
    d = ck / f"step-{{step}}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "weights.bin").write_bytes(bytes([step % 256]) * 5000)
    (d / {BAD!r}).write_text("a user's note")
    (d / "zz-last.json").write_text('{{"step": %d}}' % step)
    (d / ".gpujob-complete").write_text("")
print("done")
"""


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _check(r, got: Path, steps: tuple[int, ...]) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    # named, escaped: no raw newline splits the line a script reads
    assert "/notes\\nfor later.txt'" in r.stderr and "NOT pulled" in r.stderr, r.stderr
    for step in steps:
        d = got / "ckpt" / f"step-{step}"
        assert (d / "weights.bin").read_bytes() == bytes([step % 256]) * 5000
        assert (d / "zz-last.json").read_text() == f'{{"step": {step}}}'
        assert (d / ".gpujob-complete").exists()
        assert not any("\n" in p.name for p in d.iterdir())
    assert "done" in (got / "output.log").read_text()


def test_one_refused_name_costs_only_that_name(tmp_path: Path) -> None:
    job_id = submit("local", write_job(tmp_path, "nl", JOB, "python main.py"))["job_id"]
    wait_state("local", job_id, ("succeeded",))

    r = run_cli("pull", job_id, str(tmp_path / "all"), "--json")
    _check(r, tmp_path / "all" / job_id, (100, 200))
    doc = json.loads(r.stdout)
    assert doc["refused"] == [f"ckpt/step-100/{BAD}", f"ckpt/step-200/{BAD}"], doc

    r = run_cli("pull", job_id, str(tmp_path / "latest"), "--latest")
    _check(r, tmp_path / "latest" / job_id, (200,))
    assert "step-100" not in _files(tmp_path / "latest" / job_id)

    r = run_cli("pull", job_id, str(tmp_path / "follow"), "--follow", "0.2")
    _check(r, tmp_path / "follow" / job_id, (200,))


# the name travels host to host (a move's stream is no file list on the user's machine)
MOVING = f"""
import os, time
from pathlib import Path
ck = Path(os.environ["GPUJOB_CKPT_DIR"])
if os.environ["GPUJOB_RESUME"]:
    d = Path(os.environ["GPUJOB_RESUME"])
    print("resumed with", sorted(p.name for p in d.iterdir()), flush=True)
    raise SystemExit(0)
d = ck / "step-100"
d.mkdir(parents=True)
(d / "weights.bin").write_bytes(b"w" * 5000)
(d / {BAD!r}).write_text("a user's note")
(d / ".gpujob-complete").write_text("")
Path(os.environ["GPUJOB_STOP_FILE"] + ".watch").touch()  # it leaves at once on a stop request
while not os.path.exists(os.environ["GPUJOB_STOP_FILE"]):
    time.sleep(0.05)
"""


def test_a_move_carries_a_name_pull_refuses(two_hosts: tuple[Sshd, Sshd], tmp_path: Path) -> None:  # noqa: F811
    job_id = submit("a", write_job(tmp_path, "mv", MOVING, "python main.py"))["job_id"]
    old_dir, new_dir = tmp_path / "root-a" / "jobs" / job_id, tmp_path / "root-b" / "jobs" / job_id
    wait_for(lambda: (old_dir / "ckpt" / "step-100" / ".gpujob-complete").exists(), 60, "the checkpoint")
    r = run_cli("move", job_id, "--to", "b", "--json", timeout=300)
    assert r.returncode == 0, r.stderr + r.stdout
    assert json.loads(r.stdout)["checkpoint"] == "ckpt/step-100"
    wait_state("b", job_id, ("succeeded",), 120)
    assert (new_dir / "ckpt" / "step-100" / BAD).read_text() == "a user's note"
    assert repr(sorted([".gpujob-complete", BAD, "weights.bin"])) in (new_dir / "output.log").read_text()
