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
        assert (s.name, s.run, s.python, s.launcher, s.stop.mode) == ("", "", "", spec.LAUNCHER, spec.STOP_MODE)
        assert s.stop.grace == spec.STOP_GRACE and s.checkpoint.keep == spec.CHECKPOINT_KEEP
        assert s.retry.max_restarts == 0 and s.retry.on == list(spec.RETRY_ON) and s.retry.backoff == spec.RETRY_BACKOFF
        assert s.checkpoint.backup and s.runtime_auto and s.host_env == {} and s.env == {} and s.data == []
        assert not s.autostop.active and not s.notify.enabled and s.checkpoint.mirror.targets == []


def test_a_value_of_the_wrong_shape_becomes_the_default_at_the_door() -> None:
    s = spec.JobSpec({"name": 7, "host_env": ["x"], "env": {"N": 3, "GONE": None}, "retry": "often",
                      "stop_grace": "soon", "checkpoint_keep": True, "gpus": True, "data": ["a", 3, None],
                      "autostop": "yes", "checkpoint_backup": 0, "runtime_auto": None})
    assert s.name == "" and s.host_env == {} and s.env == {"N": "3"} and s.retry.max_restarts == 0
    assert s.stop.grace == spec.STOP_GRACE and s.checkpoint.keep == spec.CHECKPOINT_KEEP and s.gpus is None
    assert s.data == ["a"] and s.autostop.said == {} and not s.autostop.active
    assert s.checkpoint.backup and s.runtime_auto  # only an explicit false turns either off


def test_what_the_laptop_writes_reads_back_whole() -> None:
    doc = {"name": "gpt", "run": "python train.py", "python": " venv ", "gpus": "0,1", "stop_grace": 30,
           "stop_mode": "checkpoint", "stop_max_wait": 600, "checkpoint_keep": 0, "checkpoint_pattern": "ckpt-*.pt",
           "retry": {"max_restarts": 2, "on": ["error"], "backoff": 1, "on_oom": "halve_batch", "move_after": 60},
           "host_env": {"GPUJOB_PATH_PREFIX": "/opt/bin"}, "checkpoint_backup": False, "runtime_auto": False}
    s = spec.JobSpec.of(doc)
    assert spec.JobSpec.of(s) is s
    assert (s.python, s.gpus, s.stop.grace, s.stop.mode, s.stop.max_wait) == ("venv", "0,1", 30.0, "checkpoint", 600.0)
    assert (s.retry.max_restarts, s.retry.on, s.retry.backoff, s.retry.on_oom, s.retry.move_after) == (
        2, ["error"], 1.0, "halve_batch", 60.0)
    assert s.checkpoint.keep == 0 and s.path_prefix == "/opt/bin" and not s.checkpoint.backup and not s.runtime_auto
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
        sent = job.to_remote()
        for sec in spec.SECTIONS:  # the laptop's value, and what the agent reads of what it sends: the default
            on_laptop, doc = (job.retry, sent["retry"]) if sec is spec.RETRY else (job, sent)
            for f in sec.fields:
                name = f.key if sec is spec.RETRY else f.sent
                assert getattr(on_laptop, name) == f.read({}) == f.read(doc), name
        assert job.launcher == agent.launcher == spec.JobSpec(sent).launcher
    waits = [inspect.signature(jobs.stop).parameters["wait"].default,
             inspect.signature(move.move).parameters["stop_wait"].default,
             inspect.signature(Job.stop).parameters["wait"].default, inspect.signature(Job.move).parameters["wait"].default,
             build_parser("move").parse_args(["move", "j", "--to", "h"]).wait,
             import_remote("__main__").build_parser().parse_args(["stop", "--job", "j"]).wait]  # the agent's verb
    assert waits == [spec.STOP_WAIT] * len(waits)


def test_the_fields_are_declared_once_for_the_laptop_the_agent_and_submit(tmp_path: Path) -> None:
    """remote/core/spec.py's declarations are the one list: the laptop's JobSpec holds each declared key
    under its spec.json name and sends exactly SENT; submit adds exactly ADDED; the agent reads every key
    of both (a declared section's through its Field, the rest by name in JobSpec) but UNREAD."""
    import ast
    import dataclasses

    from gpujob.config import spec as laptop

    declared = {f.sent for sec in spec.SECTIONS if sec is not spec.RETRY for f in sec.fields}
    fields = {f.name for f in dataclasses.fields(laptop.JobSpec)}
    assert declared <= fields and set(spec.SENT) == fields - {"workdir", "sweep", "mlflow"}  # those stay home
    assert {f.name for f in dataclasses.fields(laptop.Retry)} == set(spec.RETRY.keys)
    (tmp_path / "job.yaml").write_text("run: python train.py\nstop: {grace: 5s}\nretry: {max_restarts: 2}\n")
    sent = laptop.load_spec(tmp_path / "job.yaml").to_remote()
    assert set(sent) == set(spec.SENT) and set(sent["retry"]) == set(spec.RETRY.keys)
    assert sent["stop_grace"] == 5.0 and spec.JobSpec(sent).stop.grace == 5.0 and spec.JobSpec(sent).retry.max_restarts == 2
    assert set(spec.submitted({}, "p", "j-1")) == set(spec.ADDED)
    init = next(n for n in ast.walk(ast.parse(inspect.getsource(spec.JobSpec))) if isinstance(n, ast.FunctionDef))
    by_name = {n.args[0].value for n in ast.walk(init) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr == "get" and n.args and isinstance(n.args[0], ast.Constant)}
    reads = by_name | declared | {spec.LAUNCHER_FIELD.sent}
    assert reads == (set(spec.SENT) | set(spec.ADDED) | {"allocated"}) - set(spec.UNREAD)


def test_no_reader_takes_a_typed_section_as_a_dict() -> None:
    """autostop:, checkpoint.mirror, notify:, stop: and checkpoint: are read through their classes
    (remote/core/sections.py, remote/core/spec.py): durations parsed and defaults filled once, at the door."""
    pat = re.compile(r"""\.(autostop|notify|stop|checkpoint|mirror|cfg)\s*(\.get\(|\[["'])""")
    found = [f"{p.relative_to(REPO)}:{i}" for p in sorted((REPO / "remote").rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if pat.search(line)]
    assert not found, found
    a = spec.JobSpec({"autostop": {"max_runtime": "8h", "gpu_idle": {"below": 3}, "disk_free_below": "5GB",
                                   "plateau": {"metric": "eval_loss"}, "after": "shutdown", "pull_before_shutdown": True},
                      "checkpoint_mirror": {"targets": ["s3://b/p"], "wait": 60}, "checkpoint_keep": 0,
                      "notify": {"channels": [{"type": "slack"}]}}).autostop
    assert (a.max_runtime, a.gpu_idle and a.gpu_idle.window, a.disk_free_below, a.pull_wait) == (
        8 * 3600.0, 1800.0, 5 << 30, 1800.0)
    assert a.active and a.shutdown and a.plateau and (a.plateau.mode, a.plateau.patience) == ("min", 5)
    m = spec.JobSpec({"checkpoint_mirror": {"targets": ["s3://b/p"], "wait": 60}, "checkpoint_keep": 0}).checkpoint.mirror
    assert (m.targets, m.wait, m.alert_after, m.keep) == (["s3://b/p"], 60.0, 600.0, spec.CHECKPOINT_KEEP)


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
