"""remote/core/spec.py: spec.json read once, typed, with each default stated in one place."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from gpujob.bundle import import_remote
from tests.conftest import REPO

spec = import_remote("core.spec")


def test_an_empty_or_unreadable_spec_reads_as_the_defaults() -> None:
    for doc in (None, {}, [], "spec"):
        s = spec.JobSpec.of(doc)
        assert (s.name, s.run, s.python, s.launcher, s.stop_mode) == ("", "", "", spec.LAUNCHER, spec.STOP_MODE)
        assert s.stop_grace == spec.STOP_GRACE and s.checkpoint_keep == spec.CHECKPOINT_KEEP
        assert s.retry.max_restarts == 0 and s.retry.on == list(spec.RETRY_ON) and s.retry.backoff == spec.RETRY_BACKOFF
        assert s.checkpoint_backup and s.runtime_auto and s.host_env == {} and s.env == {} and s.data == []


def test_a_value_of_the_wrong_shape_becomes_the_default_at_the_door() -> None:
    s = spec.JobSpec({"name": 7, "host_env": ["x"], "env": {"N": 3, "GONE": None}, "retry": "often",
                      "stop_grace": "soon", "checkpoint_keep": True, "gpus": True, "data": ["a", 3, None],
                      "autostop": "yes", "checkpoint_backup": 0, "runtime_auto": None})
    assert s.name == "" and s.host_env == {} and s.env == {"N": "3"} and s.retry.max_restarts == 0
    assert s.stop_grace == spec.STOP_GRACE and s.checkpoint_keep == spec.CHECKPOINT_KEEP and s.gpus is None
    assert s.data == ["a"] and s.autostop == {}
    assert s.checkpoint_backup and s.runtime_auto  # only an explicit false turns either off


def test_what_the_laptop_writes_reads_back_whole() -> None:
    doc = {"name": "gpt", "run": "python train.py", "python": " venv ", "gpus": "0,1", "stop_grace": 30,
           "stop_mode": "checkpoint", "stop_max_wait": 600, "checkpoint_keep": 0, "checkpoint_pattern": "ckpt-*.pt",
           "retry": {"max_restarts": 2, "on": ["error"], "backoff": 1, "on_oom": "halve_batch", "move_after": 60},
           "host_env": {"GPUJOB_PATH_PREFIX": "/opt/bin"}, "checkpoint_backup": False, "runtime_auto": False}
    s = spec.JobSpec.of(doc)
    assert spec.JobSpec.of(s) is s
    assert (s.python, s.gpus, s.stop_grace, s.stop_mode, s.stop_max_wait) == ("venv", "0,1", 30.0, "checkpoint", 600.0)
    assert (s.retry.max_restarts, s.retry.on, s.retry.backoff, s.retry.on_oom, s.retry.move_after) == (
        2, ["error"], 1.0, "halve_batch", 60.0)
    assert s.checkpoint_keep == 0 and s.path_prefix == "/opt/bin" and not s.checkpoint_backup and not s.runtime_auto
    assert s.to_dict() == doc and s.with_values(allocated="1").allocated == "1" and s.allocated is None


def test_a_job_file_without_them_gets_the_agents_defaults_on_the_laptop(tmp_path: Path) -> None:
    """A key the job file leaves out means the same on both sides: the laptop's dataclass defaults, and
    what it sends for a job file that says nothing, read as remote.core.spec's defaults; a stop and a
    move wait its STOP_WAIT wherever they are asked from (use case, API, command line)."""
    from gpujob.api.client import Job
    from gpujob.cli.parser import build_parser
    from gpujob.config import spec as laptop
    from gpujob.usecases.jobs import ops as jobs
    from gpujob.usecases.relocate import move

    (tmp_path / "job.yaml").write_text("name: plain\nrun: python train.py\n")
    agent = spec.JobSpec({})
    written = laptop.JobSpec(name="plain", run="python train.py", workdir=str(tmp_path))
    for job in (written, laptop.load_spec(tmp_path / "job.yaml")):
        for key in SHARED:
            assert getattr(job, key) == getattr(agent, key), key
        for key in RETRY_SHARED:
            assert getattr(job.retry, key) == getattr(agent.retry, key), key
        sent = spec.JobSpec(job.to_remote())
        assert [getattr(sent, k) for k in SHARED] == [getattr(agent, k) for k in SHARED]
    waits = [inspect.signature(jobs.stop).parameters["wait"].default,
             inspect.signature(move.move).parameters["stop_wait"].default,
             inspect.signature(Job.stop).parameters["wait"].default, inspect.signature(Job.move).parameters["wait"].default,
             build_parser("move").parse_args(["move", "j", "--to", "h"]).wait,
             import_remote("__main__").build_parser().parse_args(["stop", "--job", "j"]).wait]  # the agent's verb
    assert waits == [spec.STOP_WAIT] * len(waits)


SHARED = ("stop_grace", "stop_mode", "stop_max_wait", "launcher", "checkpoint_keep", "checkpoint_backup", "runtime_auto")
RETRY_SHARED = ("max_restarts", "on", "backoff", "on_oom", "move_after", "move_to")


def test_each_default_is_stated_once_in_remote_core(tmp_path: Path) -> None:
    """Other values in remote/core/spec.py and protocol.py (a copy of the code) are what the laptop then
    uses: its job file defaults, its stop and move waits, the help that states them, the sync lease's wait."""
    for d in ("gpujob", "remote"):
        shutil.copytree(REPO / d, tmp_path / d, ignore=shutil.ignore_patterns("__pycache__"))
    core = tmp_path / "remote" / "core"
    changed = {"STOP_GRACE": "77.0", "STOP_WAIT": "777.0", "CHECKPOINT_KEEP": "7", "RETRY_BACKOFF": "7.0",
               "LAUNCHER": '"torchrun"', "STOP_MODE": '"checkpoint"', "ON_OOM": '"halve_batch"', "RETRY_ON": '("nan",)'}
    text = (core / "spec.py").read_text()
    for name, value in changed.items():
        text, n = re.subn(rf"^{name} = .*$", f"{name} = {value}", text, flags=re.M)
        assert n == 1, name
    (core / "spec.py").write_text(text)
    proto = (core / "protocol.py").read_text()
    (core / "protocol.py").write_text(re.sub(r"^LEASE_WAIT = .*$", "LEASE_WAIT = 66.0", proto, count=1, flags=re.M))
    code = """if True:
        import inspect
        from gpujob.cli.parser import build_parser
        from gpujob.config.spec import JobSpec
        from gpujob.usecases.jobs import ops as jobs
        from gpujob.usecases.sync import upload as sync
        j = JobSpec(name="a", run="b", workdir=".")
        print(j.stop_grace, j.stop_mode, j.launcher, j.checkpoint_keep, j.retry.backoff, j.retry.on_oom, j.retry.on)
        print(inspect.signature(jobs.stop).parameters["wait"].default, build_parser("move").parse_args(
            ["move", "j", "--to", "h"]).wait, sync.LEASE_WAIT)
        print(" ".join(build_parser("stop")._subparsers._group_actions[0].choices["stop"].format_help().split()))
    """
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert r.returncode == 0, r.stderr[-2000:]
    laptop, waits, helps = r.stdout.splitlines()
    assert laptop == "77.0 checkpoint torchrun 7 7.0 halve_batch ['nan']"
    assert waits == "777.0 777.0 66.0"
    assert "(default 777; with --after-checkpoint: --max-wait plus 777, or 4377 without one)" in helps


def test_the_docs_state_the_same_defaults() -> None:
    """docs/job-spec.md's Default column and docs/cli.md's stop --wait say what remote/core/spec.py holds."""
    rows = {}
    for line in (REPO / "docs" / "job-spec.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 4 and cells[1].startswith("`"):
            rows[cells[1].strip("`")] = cells[3]
    assert rows["checkpoint.keep"] == f"`{spec.CHECKPOINT_KEEP}`"
    assert rows["retry.on"] == "`[" + ", ".join(spec.RETRY_ON) + "]`"
    assert rows["retry.backoff"] == f"`{spec.RETRY_BACKOFF:g}s`" and rows["retry.on_oom"] == f"`{spec.ON_OOM}`"
    assert rows["stop.grace"] == f"`{spec.STOP_GRACE:g}s`" and rows["stop.mode"] == f"`{spec.STOP_MODE}`"
    assert rows["launcher"] == f"`{spec.LAUNCHER}`"
    cli = (REPO / "docs" / "cli.md").read_text()
    assert f"how long to wait for the job to end ({spec.STOP_WAIT:g}; with `--after-checkpoint`: `--max-wait` plus " \
           f"{spec.STOP_WAIT:g}," in cli
