"""A user's plain loop that writes ``ckpts/ckpt_<step>.pt`` in its own folder (the job file says
``checkpoint: {dir: ckpts}``) and picks the newest file itself: ``gpujob move`` to another host
takes those checkpoints along, and the loop goes on from its step there (a relative
``checkpoint.dir`` is the job's own ``ckpt/``, not shared storage already on the new host)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.byo_helpers import QUIET
from tests.conftest import Sshd
from tests.helpers import needs, submit, wait_for, wait_state, write_job
from tests.test_move import move, two_hosts  # noqa: F401 (the fixture)

# as users write it: no gpujob, no argv, resume from the newest file of its own folder
LOOP = """
    import glob, os, re, time
    import torch

    os.makedirs("ckpts", exist_ok=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    found = sorted(glob.glob("ckpts/ckpt_*.pt"), key=lambda p: int(re.findall(r"\\d+", p)[-1]))
    if found:
        state = torch.load(found[-1])
        model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); start = state["step"]
        print("resumed from", found[-1], flush=True)
    for step in range(start + 1, 400):
        x = torch.randn(16, 4)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad(); loss.backward(); opt.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step % 5 == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, f"ckpts/ckpt_{step}.pt")
        time.sleep(0.05)
"""


def test_move_takes_the_checkpoints_of_a_relative_checkpoint_dir(two_hosts: tuple[Sshd, Sshd],  # noqa: F811
                                                                  tmp_path: Path) -> None:
    needs("torch")
    job = write_job(tmp_path, "loop", LOOP, "python main.py", env=QUIET,
                    checkpoint={"dir": "ckpts", "pattern": "ckpt_*.pt"})
    job_id = submit("a", job)["job_id"]
    old = tmp_path / "root-a" / "jobs" / job_id
    wait_for(lambda: len(list((old / "ckpt").glob("ckpt_*.pt"))) >= 2, 60, "two checkpoints on host a")
    res = move(job_id, "b")
    assert res["checkpoint"], res
    new = tmp_path / "root-b" / "jobs" / job_id
    log = new / "output.log"
    wait_for(lambda: log.exists() and "resumed from" in log.read_text(), 60,
             lambda: log.read_text()[-2000:] if log.exists() else "no log on b")
    step = int(re.search(r"resumed from ckpts/ckpt_(\d+)\.pt", log.read_text()).group(1))
    assert step >= 10 and (new / "ckpt" / f"ckpt_{step}.pt").exists()
    wait_state("b", job_id, ("running",), 30)
