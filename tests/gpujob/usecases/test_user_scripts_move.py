"""A user's plain loop that writes ``ckpts/ckpt_<step>.pt`` under its code folder (the job file says
``checkpoint: {dir: ckpts}``): ``gpujob move`` to another host takes those checkpoints along, and
the loop goes on from its step there (a relative ``checkpoint.dir`` is the job's own ``ckpt/``,
not shared storage already on the new host)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.byo_helpers import QUIET
from tests.conftest import Sshd
from tests.gpujob.usecases.test_move import move, two_hosts  # noqa: F401 (the fixture)
from tests.helpers import needs, submit, wait_for, wait_state, write_job
from tests.remote.ckpt.test_user_scripts_checkpoints import LOOP


def test_move_takes_the_checkpoints_of_a_relative_checkpoint_dir(two_hosts: tuple[Sshd, Sshd],  # noqa: F811
                                                                  tmp_path: Path) -> None:
    needs("torch")
    run = 'python main.py --save_dir ckpts --steps 400 ${GPUJOB_RESUME:+--resume "$GPUJOB_RESUME"}'
    job = write_job(tmp_path, "loop", LOOP, run, env=QUIET,
                    checkpoint={"dir": "ckpts", "pattern": "ckpt_*.pt"})
    job_id = submit("a", job)["job_id"]
    old = tmp_path / "root-a" / "jobs" / job_id
    wait_for(lambda: len(list((old / "ckpt").glob("ckpt_*.pt"))) >= 2, 60, "two checkpoints on host a")
    res = move(job_id, "b")
    assert res["checkpoint"], res
    new = tmp_path / "root-b" / "jobs" / job_id
    log = new / "output.log"
    wait_for(lambda: log.exists() and "resumed at step" in log.read_text(), 60,
             lambda: log.read_text()[-2000:] if log.exists() else "no log on b")
    step = int(re.search(r"resumed at step (\d+)", log.read_text()).group(1))
    assert step >= 10 and (new / "ckpt" / f"ckpt_{step}.pt").exists()
    wait_state("b", job_id, ("running",), 30)
