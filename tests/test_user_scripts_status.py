"""What ``gpujob status`` shows for users' scripts that never import gpujob: a loop that writes
its loss only to TensorBoard (``SummaryWriter()``'s default ``runs/`` folder, named in the job
file) has that loss in the job list's LOSS column, not only in ``status JOB``."""

from __future__ import annotations

from pathlib import Path

from tests.byo_helpers import QUIET
from tests.conftest import run_cli
from tests.helpers import needs, status, submit, wait_state, write_job

TB_LOOP = """
    import torch
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter()  # runs/<date>_<host>
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 31):
        x = torch.randn(16, 4)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad(); loss.backward(); opt.step()
        writer.add_scalar("Loss/train", loss.item(), step)
    writer.close()
"""


def test_the_job_list_shows_a_loss_named_otherwise(isolated: Path, tmp_path: Path) -> None:
    needs("torch", "tensorboard")
    job = write_job(tmp_path, "tbloop", TB_LOOP, "python main.py", env=QUIET, tensorboard={"logdir": "runs"})
    job_id = submit("local", job)["job_id"]
    wait_state("local", job_id, ("succeeded", "failed"), 90, root=tmp_path / "local-root")
    st = status("local", job_id)
    assert st["state"] == "succeeded" and st["metrics_source"] == "tensorboard", st
    last = st["last_metrics"]
    assert last["step"] == 30 and "loss" not in last, last
    r = run_cli("status", "--host", "local", env_extra={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith(job_id)).split()
    header = next(ln for ln in r.stdout.splitlines() if ln.startswith("JOB")).split()
    assert float(row[header.index("LOSS")]) == float(f"{last['Loss/train']:.4g}"), r.stdout
