"""The supervisor's watchers (remote/run/watchers.py): one protocol, their order, error isolation."""

from __future__ import annotations

import json
from pathlib import Path

from remote.core.layout import Root
from remote.run.watchers import Watchers


class Counting:
    """A watcher that looks each turn and names ``reason`` (None: no stop)."""

    interval = 0.0

    def __init__(self, name: str, reason: str | None = None) -> None:
        self.name, self.reason, self.ticks = name, reason, 0

    def tick(self, now: float) -> str | None:
        self.ticks += 1
        return self.reason


class Raising(Counting):
    def tick(self, now: float) -> str | None:
        self.ticks += 1
        raise OSError(28, "No space left on device")


def test_a_watcher_that_raises_is_said_once_and_the_others_and_the_job_go_on(tmp_path: Path) -> None:
    root = Root(str(tmp_path / "r"))
    root.root.mkdir(parents=True)
    broken, after = Raising("GPU sampling"), Counting("metrics")
    ws = Watchers(root, "j1")
    ws.add(after)
    ws.add(broken, first=True)
    for t in range(3):
        assert ws.tick(float(t)) == (None, None)  # no reason to stop, no exception out of the loop
    assert broken.ticks == 3 and after.ticks == 3  # tried again each turn; the next one never skipped
    said = [ln for ln in root.agent_log.read_text().splitlines() if "watcher failed" in ln]
    assert len(said) == 1 and "j1: the GPU sampling watcher failed" in said[0] and "No space left" in said[0]


def test_the_first_reason_ends_the_turn_in_order(tmp_path: Path) -> None:
    root = Root(str(tmp_path / "r"))
    first, stops, last = Counting("a"), Counting("b", "autostop: budget"), Counting("c")
    ws = Watchers(root, "j1")
    for w in (first, stops, last):
        ws.add(w)
    assert ws.tick(0.0) == ("autostop: budget", stops)
    assert (first.ticks, stops.ticks, last.ticks) == (1, 1, 0)  # one after the reason is not asked


def test_the_supervisor_builds_its_watchers_in_their_order(tmp_path: Path) -> None:
    """The stop after a checkpoint first; auto-stop last (the order a stop reason is looked for in)."""
    from remote.run.supervisor import Supervisor

    root = Root(str(tmp_path / "r"))
    job = root.job("j1")
    job.code.mkdir(parents=True)
    spec = {"name": "w", "run": "python train.py", "checkpoint_mirror": {"targets": [str(tmp_path / "m")]},
            "autostop": {"max_runtime": "1h"}, "host_env": {"GPUJOB_GPU_SAMPLE": "7"}}
    (job.path / "spec.json").write_text(json.dumps(spec))
    (job.path / "status.json").write_text(json.dumps({"job_id": "j1", "state": "queued"}))
    sup = Supervisor(root, job)
    assert [w.name for w in sup.watchers.items] == [
        "stop after checkpoint", "GPU sampling", "checkpoint rotation", "kept copy", "metrics", "checkpoint mirror",
        "auto-stop"]
    assert [w.interval for w in sup.watchers.items][:3] == [1.0, 7.0, 5.0]  # their own intervals
    (job.path / "spec.json").write_text(json.dumps({"name": "w", "run": "true",
                                                    "checkpoint_backup": False}))
    assert [w.name for w in Supervisor(root, job).watchers.items] == [
        "stop after checkpoint", "GPU sampling", "checkpoint rotation", "metrics"]
