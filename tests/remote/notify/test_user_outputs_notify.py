"""The failure notification of a plain script that never imports gpujob: it names the job, the
outcome, the last metrics and the error line, and its log tail shows what a terminal showed (a tqdm
bar redrawn in place is one line, not one per redraw that crowd the traceback out)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import needs, submit, wait_state, write_job
from tests.remote.run.test_events import Hook, notify_cfg

FAILING = """
    import time
    from tqdm import tqdm

    def read_row(i):
        if i == 40:
            raise ValueError(f"bad sample at index {i}: expected 4 features, got 3")
        return [0.0] * 4

    def batch(i):
        return [read_row(i)]

    for i in tqdm(range(100), mininterval=0, desc="train"):
        batch(i)
        if i % 10 == 0:
            tqdm.write(f"step {i} loss {1 / (i + 1):.4f}")
        time.sleep(0.01)
"""


def test_a_failing_scripts_notification_names_the_error_and_keeps_the_traceback(hook: Hook, tmp_path: Path) -> None:
    needs("tqdm")
    job = write_job(tmp_path, "breaks", FAILING, "python main.py", notify=notify_cfg(hook, ["failed"]))
    job_id = submit("local", job)["job_id"]
    st = wait_state("local", job_id, ("failed", "succeeded"))
    assert st["state"] == "failed"
    body = hook.wait_for("failed", 30)["body"]
    assert body["job_id"] == job_id and body["name"] == "breaks" and body["reason"] == "error"
    assert body["diagnosis"] == "ValueError: bad sample at index 40: expected 4 features, got 3"
    assert body["metrics"]["loss"] == 0.0323 and body["metrics"]["step"] == 40  # "step 30 loss", bar at 40
    tail = body["log_tail"]
    bars = [line for line in tail if "it/s]" in line]
    assert len(bars) == 1 and "40/100" in bars[0], tail  # the bar as it stood when the script broke
    assert "Traceback (most recent call last):" in "\n".join(tail) and "in read_row" in "\n".join(tail)
    assert "ValueError: bad sample" in body["text"] and "failed" in body["title"]
    assert [line for line in st["log_tail"] if "it/s]" in line] == bars  # status --json: the same view
