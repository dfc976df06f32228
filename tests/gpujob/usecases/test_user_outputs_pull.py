"""`pull --latest` of a script that never imports gpujob brings what its user expects: the newest
complete checkpoint and the outputs saved beside the checkpoints (the final model, a results file),
never the older checkpoints nor one cut short by a kill."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import run_cli
from tests.helpers import needs, submit, wait_state, write_job

ACCELERATE = """
    import json, os, sys, torch
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration
    out = sys.argv[1]
    acc = Accelerator(cpu=True, project_config=ProjectConfiguration(project_dir=out, automatic_checkpoint_naming=True))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, opt = acc.prepare(model, opt)
    for step in range(1, 7):
        x = torch.randn(8, 4)
        loss = ((model(x) - 1) ** 2).mean()
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        if step % 2 == 0:
            acc.save_state()  # checkpoints/checkpoint_0, _1, _2
    acc.save_model(model, os.path.join(out, "final"))
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"loss": loss.item()}, f)
    # a save killed half-way: the weights are there, the random states (written last) are not
    os.makedirs(os.path.join(out, "checkpoints", "checkpoint_3"))
    with open(os.path.join(out, "checkpoints", "checkpoint_3", "model.safetensors"), "wb") as f:
        f.write(b"cut short")
"""


def test_pull_latest_brings_the_newest_complete_state_and_the_outputs_beside_it(tmp_path: Path) -> None:
    needs("torch", "accelerate")
    job = write_job(tmp_path, "accel", ACCELERATE, "python main.py $GPUJOB_CKPT_DIR", env={"OMP_NUM_THREADS": "1"})
    job_id = submit("local", job)["job_id"]
    st = wait_state("local", job_id, ("succeeded", "failed"), 120)
    assert st["state"] == "succeeded", st
    # accelerate numbers its saves, not steps: status does not call the 3rd save "step 2"
    text = run_cli("status", job_id, "--host", "local", env_extra={"COLUMNS": "200"}).stdout
    assert "newest checkpoints/checkpoint_2 (accelerate, save 2)" in text, text
    r = run_cli("pull", job_id, str(tmp_path / "p"), "--latest", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["selected"] == "ckpt/checkpoints/checkpoint_2"
    got = Path(doc["dest"]) / "ckpt"
    files = sorted(p.relative_to(got).as_posix() for p in got.rglob("*") if p.is_file())
    assert files == ["checkpoints/checkpoint_2/model.safetensors", "checkpoints/checkpoint_2/optimizer.bin",
                     "checkpoints/checkpoint_2/random_states_0.pkl", "final/model.safetensors", "results.json"]
    from safetensors.torch import load_file

    assert load_file(str(got / "final" / "model.safetensors"))["weight"].shape == (1, 4)
    assert "loss" in json.loads((got / "results.json").read_text())


PLAIN = """
    import os, torch
    os.makedirs("outputs", exist_ok=True)  # the script's own default, not the job file's checkpoint.dir
    model = torch.nn.Linear(4, 1)
    for step in (4, 8):
        torch.save({"model": model.state_dict(), "step": step}, f"outputs/ckpt_{step}.pt")
    with open("final/trainer_state.json", "w") as f:  # checkpoint.dir (a link to ckpt/): pulled as ckpt/
        f.write("{}")
"""


def test_checkpoints_written_outside_the_checkpoint_folder_are_named_with_the_next_step(tmp_path: Path) -> None:
    needs("torch")
    job = write_job(tmp_path, "stray", PLAIN, "python main.py", env={"OMP_NUM_THREADS": "1"},
                    checkpoint={"dir": "final"})
    (job.parent / "outputs").mkdir()
    old = job.parent / "outputs" / "pretrained.pt"  # synced with the code: not the job's
    old.write_bytes(b"weights from the laptop")
    os.utime(old, (1e9, 1e9))
    job_id = submit("local", job)["job_id"]
    assert wait_state("local", job_id, ("succeeded", "failed"), 120)["state"] == "succeeded"
    dest = str(tmp_path / "p")

    r = run_cli("pull", job_id, dest, "--latest")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "code/outputs/ckpt_" in r.stderr and "--include 'code/outputs/*'" in r.stderr, r.stderr
    assert "checkpoint: {dir: outputs}" in r.stderr

    r = run_cli("pull", job_id, dest, "--json")  # the logs come; the note says what stayed behind
    doc = json.loads(r.stdout)
    assert sorted(doc["stray"]) == ["code/outputs/ckpt_4.pt", "code/outputs/ckpt_8.pt"]
    assert "--include 'code/outputs/*'" in r.stderr

    r = run_cli("pull", job_id, dest, "--include", "code/outputs/*", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["stray"] == [] and "note:" not in r.stderr, r.stderr
    got = Path(json.loads(r.stdout)["dest"]) / "code" / "outputs"
    assert sorted(p.name for p in got.iterdir()) == ["ckpt_4.pt", "ckpt_8.pt", "pretrained.pt"]
