"""What ``gpujob status`` shows for users' scripts that never import gpujob: a loop that writes
its loss only to TensorBoard (``SummaryWriter()``'s default ``runs/`` folder, named in the job
file) has that loss in the job list's LOSS column, not only in ``status JOB``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.byo_helpers import QUIET
from tests.conftest import run_cli
from tests.helpers import needs, status, submit, wait_for, wait_state, write_job

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
    assert header[header.index("STEP") + 1:][:2] == ["LAST", "LOSS"], header
    assert float(row[header.index("STEP") + 1]) == float(f"{last['Loss/train']:.4g}"), r.stdout


# mid-run (past one epoch) a loop holds until the test has read its status, or 120 s: a loaded
# machine's status call may take longer than the whole run would (the rate and ETA come from the
# records' times, which a hold does not change)
HOLD = """
    import os, time
    def hold():
        end = time.time() + 120
        while not os.path.exists(SEEN) and time.time() < end:
            time.sleep(0.05)
"""

# the tutorials' loop: the step count starts again each epoch
TUTORIAL = HOLD + """
    import time, torch
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    num_epochs, total_step = 3, 8
    for epoch in range(num_epochs):
        for i in range(total_step):
            x = torch.randn(16, 4)
            loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
            opt.zero_grad(); loss.backward(); opt.step()
            time.sleep(0.2)
            if (i + 1) % 2 == 0:
                print(f"Epoch [{epoch + 1}/{num_epochs}], Step [{i + 1}/{total_step}], Loss: {loss.item():.4f}", flush=True)
            if epoch * total_step + i + 1 == 12:
                hold()
"""

# one summary line per epoch, nothing per step
EPOCHS_ONLY = HOLD + """
    import time, torch
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    EPOCHS = 24
    for epoch in range(EPOCHS):
        x = torch.randn(16, 4)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(0.2)
        print(f"Epoch {epoch}/{EPOCHS} | train loss={loss.item():.4f} | lr=0.05", flush=True)
        if epoch == 12:
            hold()
"""


@pytest.mark.parametrize(("script", "total"), [(TUTORIAL, 24), (EPOCHS_ONLY, 24)], ids=["tutorial", "epochs"])
def test_progress_and_eta_of_loops_that_count_by_epoch(isolated: Path, tmp_path: Path, script: str, total: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Mid-run, status counts the run's steps (not the epoch's) against the run's total, with a
    rate and an ETA."""
    needs("torch")
    # the agent reads the log every 0.2 s (not 2 s): on a loaded machine one read could otherwise take
    # every line up to the hold at once, all with one time, and a rate needs two times
    monkeypatch.setenv("GPUJOB_METRICS_EVERY", "0.2")
    seen_file = tmp_path / "seen"
    job = write_job(tmp_path, "byepoch", f"    SEEN = {str(seen_file)!r}\n" + script, "python main.py", env=QUIET)
    job_id = submit("local", job)["job_id"]
    seen: dict = {}

    def past_one_epoch() -> bool:
        seen.update(status("local", job_id))
        step = (seen.get("latest_metrics") or {}).get("step")
        return seen["state"] != "running" or (step is not None and step > 9 and seen["eta_s"] is not None)

    wait_for(past_one_epoch, 60, lambda: str({k: seen.get(k) for k in ("state", "latest_metrics", "last_line")}))
    seen_file.write_text("seen")  # the loop goes on
    assert seen["state"] == "running", seen
    assert seen["max_steps"] == total and seen["eta_s"] is not None, seen
    assert 0 < seen["eta_s"] < 60 and seen["latest_metrics"]["step"] < total, seen
    # a step (an epoch) sleeps 0.2 s: no faster than that, though the log is read in batches; each line
    # is timed when it is read, so one late read of the first lines shortens the 2.4 s span by up to a read
    # (0.2 s, more on a loaded machine): 30 % over, where counting an epoch or a batch as a step is 8x
    assert seen["steps_per_s"] <= 1 / 0.2 * 1.3, seen["steps_per_s"]
    st = wait_state("local", job_id, ("succeeded", "failed"), 90, root=tmp_path / "local-root")
    assert st["state"] == "succeeded" and st["last_metrics"]["step"] == total, st


# a loop that prints `step N/100` and writes the same loss to TensorBoard, resuming from the step it
# saved; it holds until the test has read its status (or 120 s) at step 20 (attempt 1, killed with
# kill -9 at step 40), at step 70 (attempt 2, stopped there and resumed) and at step 90 (attempt 3)
RESTARTED = """
    import os, signal, time
    from torch.utils.tensorboard import SummaryWriter

    def hold(mark):
        end = time.time() + 120
        while not os.path.exists(mark) and time.time() < end:
            time.sleep(0.05)

    start = int(open("step.txt").read()) if os.path.exists("step.txt") else 0
    writer = SummaryWriter()  # runs/<date>_<host>: a new folder, a new event file, each attempt
    for step in range(start + 1, 101):
        time.sleep(0.05)
        print(f"step {step}/100 loss {1 / step:.4f}", flush=True)
        writer.add_scalar("train/loss", 1 / step, step)
        with open("step.txt", "w") as f:  # its checkpoint
            f.write(str(step))
        if step in (20, 70, 90):
            hold(SEEN + str(step))
        if step == 40 and start == 0:
            os.kill(os.getpid(), signal.SIGKILL)  # what a watchdog or the platform does
    writer.close()
"""


def test_progress_and_eta_go_on_into_a_restarted_attempt(isolated: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop that prints ``step N/100`` and writes a SummaryWriter keeps its total (100) and an ETA,
    though its metrics come from the event files; restarted after a kill -9, and resumed after a
    stop, status shows the new attempt's step, total, rate, ETA and loss within seconds of its
    first step."""
    needs("torch", "tensorboard")
    monkeypatch.setenv("GPUJOB_METRICS_EVERY", "0.5")
    seen_file = tmp_path / "seen"
    job = write_job(tmp_path, "restarted", f"    SEEN = {str(seen_file)!r}\n" + RESTARTED, "python main.py",
                    env=QUIET, tensorboard={"logdir": "runs"}, retry={"max_restarts": 1, "backoff": "0s"})
    job_id = submit("local", job)["job_id"]
    jd = tmp_path / "local-root" / "jobs" / job_id
    seen: dict = {}

    def loss_of(m: dict) -> float | None:
        """The loss as its source names it: the event files' tag as written, the log's printed name."""
        return m.get("train/loss", m.get("loss"))

    def shows(attempt: int, past: int) -> bool:
        seen.clear()
        seen.update(status("local", job_id))
        seen["asked_at"] = time.time()
        assert seen["state"] in ("queued", "running", "restarting", "stopped"), seen
        m, bill = seen.get("latest_metrics") or {}, seen.get("billing") or {}  # billing: what ls and the dashboard show
        return seen.get("attempt") == attempt and (m.get("step") or 0) > past and loss_of(m) is not None \
            and seen.get("eta_s") is not None and bill.get("eta_s") is not None

    def brief() -> str:
        return str({k: seen.get(k) for k in ("state", "attempt", "latest_metrics", "max_steps", "steps_per_s",
                                             "eta_s", "metrics_source", "last_line")})

    # held at step 20: the event files are the metrics source once the agent found them
    wait_for(lambda: shows(1, 10) and seen["metrics_source"] == "tensorboard", 60, brief)
    assert seen["max_steps"] == 100, brief()  # the log's total stays known
    assert 0 < seen["eta_s"] < 60 and seen["steps_per_s"] <= 1 / 0.05 * 1.05, brief()
    (tmp_path / "seen20").write_text("seen")

    def promptly(attempt: int, past: int, held: int) -> None:
        """Status shows the attempt's own figures within 10 s of its first step (``past`` + 1)."""
        wait_for(lambda: shows(attempt, past), 60, brief)
        m, bill = seen["latest_metrics"], seen["billing"]
        assert seen["max_steps"] == 100 and 0 < seen["eta_s"] < 60 and seen["steps_per_s"] > 0, brief()
        assert past < m["step"] <= held and loss_of(m) <= 1 / (past + 1) + 1e-4, brief()  # not an earlier attempt's
        assert bill["max_steps"] == 100 and bill["step"] > past, bill
        # its first step's time as the event file has it (the wall time of add_scalar)
        first = min(r["t"] for r in map(json.loads, (jd / "metrics.tb.jsonl").read_text().splitlines())
                    if r.get("step", 0) > past)
        lag = seen["asked_at"] - first
        assert lag < 10, f"attempt {attempt}'s first step at {first}, shown {lag:.1f} s later"

    promptly(2, 40, 70)  # restarted after the kill -9 at step 40
    saved = jd / "code" / "step.txt"
    wait_for(lambda: saved.read_text() == "70", 60, lambda: saved.read_text())  # held there: stopped, resumed from 70
    r = run_cli("stop", job_id, "--host", "local", "--json", timeout=90)
    assert r.returncode == 0, r.stderr
    r = run_cli("resume", job_id, "--host", "local", "--json")
    assert r.returncode == 0, r.stderr
    promptly(3, 70, 90)
    (tmp_path / "seen90").write_text("seen")
    st = wait_state("local", job_id, ("succeeded", "failed"), 90, root=tmp_path / "local-root")
    assert st["state"] == "succeeded" and st["attempt"] == 3 and st["last_metrics"]["step"] == 100, st
