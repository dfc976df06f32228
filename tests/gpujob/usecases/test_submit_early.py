"""The host's ``submit`` command starts while the upload runs (gpujob/usecases/launch/early.py), over
a real sshd: its login shell and Python start are off a first submit's critical path, and an
upload that fails leaves neither a job nor a waiting command behind (issue 47)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpujob.config.hosts import HostStore
from gpujob.config.spec import JobSpec
from gpujob.transport import connect
from gpujob.transport.agent import Agent
from gpujob.usecases.launch.submit import submit
from tests.helpers import processes_with


def _tree(src: Path, n: int = 400) -> None:
    for i in range(n):
        (src / f"pkg{i % 9}").mkdir(parents=True, exist_ok=True)
        (src / f"pkg{i % 9}" / f"m{i}.py").write_text(f"x = {i}\n" * 40)
    (src / "main.py").write_text("print('ran')\n")


def _submit_commands(root: str) -> list[int]:
    """Pids of the agent's ``submit`` commands under ``root`` (the sshd runs on this machine)."""
    return processes_with(b"remote", root.encode(), b"submit")


def _wait_for(cond, timeout: float) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_the_submit_command_is_started_while_the_upload_runs(ssh_host: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    _tree(src)
    host = HostStore().get(ssh_host)
    seen: list[bool] = []

    def progress(done: int, total: int) -> None:  # the stream's reader, before its last bytes are sent
        if done >= total and not seen:
            seen.append(_wait_for(lambda: bool(_submit_commands(host.root)), 20))

    with Agent(connect(host), host) as agent:
        res = submit(agent, JobSpec(name="early", run="python main.py", workdir=str(src)), host, progress)
    assert seen == [True], "no submit command was running on the host before the upload ended"
    assert res["sync"]["files_sent"] == 401 and res["job_id"].startswith("early")
    assert (Path(host.root) / "jobs" / res["job_id"] / "code" / "pkg3" / "m3.py").read_text() == "x = 3\n" * 40
    assert _wait_for(lambda: not _submit_commands(host.root), 20)


def test_an_upload_that_fails_leaves_no_job_and_no_waiting_command(ssh_host: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    _tree(src)
    host = HostStore().get(ssh_host)

    class Broke(Exception):
        pass

    def progress(done: int, total: int) -> None:
        if done >= total:
            assert _wait_for(lambda: bool(_submit_commands(host.root)), 20)  # the command is waiting
            raise Broke()

    with Agent(connect(host), host) as agent, pytest.raises(Broke):
        submit(agent, JobSpec(name="broke", run="python main.py", workdir=str(src)), host, progress)
    assert _wait_for(lambda: not _submit_commands(host.root), 20), "a submit command waits on after the upload failed"
    jobs = Path(host.root) / "jobs"
    assert not jobs.exists() or not [p for p in jobs.iterdir() if p.name.startswith("broke")]
