"""A script saving into the folder ``checkpoint.dir`` names, linked by the agent (``dir: .`` links
``<job>/ckpt`` to the code; an absolute ``dir`` to shared storage): ``pull`` brings the checkpoint
files themselves, for ``--latest`` and a whole pull, and never the link alone nor the code."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from tests.byo_helpers import job_dir
from tests.conftest import run_cli
from tests.helpers import submit, wait_for, wait_state, write_job

# a loop in the style of a GPT trainer: saves ckpt_<iter>.pt where it is told (its working folder)
SAVER = """
    import os, sys, zipfile
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for it in (1, 2):  # a zip archive, as torch.save writes
        with zipfile.ZipFile(os.path.join(out, "ckpt_%d.pt" % it), "w") as z:
            z.writestr("data.pkl", b"weights %d" % it * 1000)
        print("iter %d: loss 0.9, time 4.0ms" % it, flush=True)
"""


@pytest.mark.parametrize("form", ["relative", "absolute"])
def test_pull_follows_the_checkpoint_link(tmp_path: Path, form: str) -> None:
    shared = tmp_path / "shared-fs"
    ckpt = {"dir": ".", "pattern": "ckpt_*.pt"} if form == "relative" else {"dir": str(shared), "pattern": "ckpt_*.pt"}
    out = "." if form == "relative" else "$GPUJOB_CKPT_DIR"
    job = write_job(tmp_path, f"link{form[:3]}", SAVER, f"python main.py {out}", checkpoint=ckpt)
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    assert wait_state("local", job_id, ("succeeded", "failed"), 60, root=jd.parent.parent)["state"] == "succeeded"
    assert (jd / "ckpt").is_symlink()
    dest = tmp_path / "pulled"
    r = run_cli("pull", job_id, str(dest), "--latest", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    got = dest / job_id / "ckpt"
    assert doc["selected"] == "ckpt/ckpt_2.pt" and not got.is_symlink(), doc
    assert zipfile.ZipFile(got / "ckpt_2.pt").read("data.pkl") == b"weights 2" * 1000
    assert not (got / "ckpt_1.pt").exists() and not (got / "main.py").exists()
    # the whole pull: both checkpoints, as files, and none of the code
    r = run_cli("pull", job_id, str(tmp_path / "all"), "--json")
    assert r.returncode == 0, r.stderr
    whole = tmp_path / "all" / job_id / "ckpt"
    assert sorted(p.name for p in whole.iterdir()) == ["ckpt_1.pt", "ckpt_2.pt"], list(whole.iterdir())
    assert json.loads(r.stdout)["skipped"] == []


def test_pull_of_a_stopped_job_says_the_files_beside_are_its_state_at_the_stop(tmp_path: Path) -> None:
    """An HF example stopped by ``gpujob stop`` writes its "final" model and results on the way out:
    ``pull --latest`` says they are the state at the stop, not a finished training's."""
    script = SAVER.replace('print("iter %d', 'time.sleep(0.1 if it == 1 else 60); print("iter %d').replace(
        "import os, sys, zipfile", "import os, sys, time, zipfile")
    job = write_job(tmp_path, "stopped", script, "python main.py $GPUJOB_CKPT_DIR")
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    wait_for(lambda: (jd / "ckpt" / "ckpt_2.pt").exists(), 60, "the second checkpoint")
    assert run_cli("stop", job_id, "--host", "local").returncode == 0
    r = run_cli("pull", job_id, str(tmp_path / "p"), "--latest", "--json")
    assert r.returncode == 0, r.stderr
    assert "stopped before its end" in json.loads(r.stdout)["note"] and "note: the job was stopped" in r.stderr
