"""Power commands never hang gpujob nor cut a live job: a provider's switch at the same boundary
(tests/stand_ins/power_switch.py, a program run under ``bash -c``) that hangs with a child of its own,
a real sshd host running a real job for ``host off``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, run_cli
from tests.helpers import remote_root, wait_for, wait_state
from tests.mirror_lab import TRAIN

SWITCH = REPO / "tests" / "stand_ins" / "power_switch.py"


def switch(tmp_path: Path, **conf: object) -> tuple[Path, dict[str, str]]:
    """The stand-in switch's folder and the four power commands that drive it."""
    d = tmp_path / "switch"
    d.mkdir()
    (d / "conf.json").write_text(json.dumps({"ns": "", "addr": "127.0.0.1", "user": "root", "sshd": "", **conf}))
    cmd = f"{sys.executable} {SWITCH} {d}"
    return d, {v: f"{cmd} {v}" for v in ("on", "off", "state", "address")}


def dead_port() -> int:
    with socket.socket() as s:  # bound, closed: nothing listens there (a connect is refused)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def hung_pids(d: Path, verb: str) -> list[int]:
    wait_for(lambda: (d / f"{verb}.child").exists(), 60, f"the hanging {verb} command to start")
    return [int((d / f"{verb}.pid").read_text()), int((d / f"{verb}.child").read_text())]


def test_a_hanging_state_answers_ls_within_its_budget_and_ends_its_processes(tmp_path: Path) -> None:
    from gpujob.config.hosts import Host, HostStore

    d, power = switch(tmp_path, hang=["state"])
    HostStore().save(Host(name="down", hostname="127.0.0.1", port=dead_port(), connect_timeout=5, power=power))
    # the run's own limit is the proof: the state command used to get 180 s here (3 min 10 s in all)
    r = run_cli("ls", "--host", "down", timeout=90, env_extra={"GPUJOB_CONNECT_RETRIES": "1"})
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    assert "whether it is powered off is not known: power.state of down gave no answer in 5 s" in r.stderr, r.stderr
    assert "gpujob host state down asks again" in r.stderr, r.stderr
    for pid in hung_pids(d, "state"):  # the switch and its `sleep` child: ended with their process group
        assert gone(pid), f"pid {pid} of the timed-out power.state still runs"


def test_a_power_command_past_its_limit_or_interrupted_is_ended_with_its_group(tmp_path: Path) -> None:
    from gpujob.config.hosts import Host, HostStore

    d, power = switch(tmp_path, hang=["state", "on"])
    HostStore().save(Host(name="slow", hostname="127.0.0.1", port=dead_port(), connect_timeout=5, power=power))
    r = run_cli("host", "state", "slow", env_extra={"GPUJOB_POWER_COMMAND_TIMEOUT": "2"})
    assert r.returncode == 2 and "power.state of slow gave no answer in 2 s and was ended" in r.stderr, r.stderr
    assert "run it by hand" in r.stderr and "Traceback" not in r.stderr
    assert all(gone(p) for p in hung_pids(d, "state"))
    # Ctrl-C while `host on` waits for its power.on: the command's group ends with gpujob, not after it
    p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "host", "on", "slow"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO), GPUJOB_POWER_QUICK_TIMEOUT="60"))
    try:
        (d / "state.child").unlink()
        (d / "conf.json").write_text(json.dumps({**json.loads((d / "conf.json").read_text()), "hang": ["on"]}))
        pids = hung_pids(d, "on")
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130
    assert all(gone(pid) for pid in pids), "the interrupted power.on still runs"


def test_host_off_refuses_while_a_job_runs_and_force_says_what_it_loses(ssh_host: str, tmp_path: Path) -> None:
    from gpujob.config.hosts import HostStore

    d, power = switch(tmp_path)
    (d / "on").write_text("1")  # state: running
    store = HostStore()
    h = store.get(ssh_host)
    h.power = {**power, "boot_timeout": "20s"}
    store.save(h)
    proj = tmp_path / "trains"
    proj.mkdir()
    (proj / "main.py").write_text(TRAIN)
    (proj / "job.yaml").write_text(json.dumps({"name": "trains", "run": "python main.py",
                                               "env": {"STEPS": "100000", "EVERY": "4", "STEP_S": "0.2"}}))
    r = run_cli("submit", str(proj / "job.yaml"), "--host", ssh_host, "--json")
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    wait_state(ssh_host, job_id, ("running",), timeout=60, root=remote_root(tmp_path, ssh_host))
    ckpt = remote_root(tmp_path, ssh_host) / "jobs" / job_id / "ckpt"
    wait_for(lambda: (ckpt / "checkpoint-4" / "trainer_state.json").exists(), 60, "a first checkpoint")

    r = run_cli("host", "off", ssh_host, env_extra={"GPUJOB_POWER_POLL": "0.2"})
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"{ssh_host} was not powered off: 1 job(s) run or wait there: {job_id} (running" in r.stderr, r.stderr
    assert f"gpujob stop {job_id} --after-checkpoint" in r.stderr and "--force" in r.stderr, r.stderr
    assert "off" not in (d / "calls.log").read_text().split(), "power.off ran while a job ran"
    assert json.loads(run_cli("status", job_id, "--json").stdout)["state"] == "running"

    r = run_cli("host", "off", ssh_host, "--force", env_extra={"GPUJOB_POWER_POLL": "0.2"})
    assert r.returncode == 0, r.stderr + r.stdout
    assert f"forced: {job_id} (running, step " in r.stderr and "loses the steps since checkpoint-" in r.stderr, r.stderr
    assert "off" in (d / "calls.log").read_text().split() and "meter off" in r.stdout


def test_host_off_of_a_host_that_cannot_be_asked(tmp_path: Path) -> None:
    from gpujob.config.hosts import Host, HostStore

    d, power = switch(tmp_path)
    (d / "on").write_text("1")
    HostStore().save(Host(name="mute", hostname="127.0.0.1", port=dead_port(), connect_timeout=5,
                          power={**power, "boot_timeout": "20s"}))
    env = {"GPUJOB_CONNECT_RETRIES": "1", "GPUJOB_POWER_POLL": "0.2"}
    r = run_cli("host", "off", "mute", env_extra=env)  # on, and its agent cannot be asked: not cut blind
    assert r.returncode == 3 and "mute was not powered off: whether a job runs there cannot be asked" in r.stderr
    assert "gpujob host off mute --force" in r.stderr and "off" not in (d / "calls.log").read_text().split()
    r = run_cli("host", "off", "mute", "--force", env_extra=env)
    assert r.returncode == 0 and "forced: whether a job runs there could not be asked" in r.stderr, r.stderr
    r = run_cli("host", "off", "mute", env_extra=env)  # off already (its state says so): nothing to cut
    assert r.returncode == 0 and "mute: off" in r.stdout, r.stderr


def test_the_agents_own_power_offs_wait_for_a_submit_on_its_way_and_end_a_hung_command(
        tmp_path: Path, monkeypatch: object) -> None:
    """The idle watcher and ``autostop.after: shutdown`` (remote/run/power.py ``busy``) count a submit whose
    code is still arriving (its project's live sync lease: no job exists yet); a shutdown command that
    hangs is ended with its process group (its `sleep` child ran on)."""
    import time

    from remote.core.layout import Root
    from remote.run import power

    root = Root(str(tmp_path / "root"))
    lease = root.root / "projects" / "p" / "sync.lease"
    lease.parent.mkdir(parents=True)
    lease.write_text(json.dumps({"token": "t", "until": time.time() + 60, "pid": os.getpid()}))
    assert power.busy(root), "a submit on its way is not idle"
    lease.write_text(json.dumps({"token": "t", "until": time.time() - 1, "pid": os.getpid()}))
    assert not power.busy(root)  # an expired lease (a submit that died) holds nothing

    monkeypatch.setenv("GPUJOB_SHUTDOWN_TIMEOUT", "1")  # type: ignore[attr-defined]
    child = tmp_path / "child.pid"
    res = power.run_shutdown(root, f"sleep 3600 & echo $! > {child}; wait", "test")
    assert res["ran"] is False and "no answer in 1 s" in res["error"], res
    assert gone(int(child.read_text())), "the hung shutdown command's child still runs"
    assert "ended with its processes" in (root.root / "agent.log").read_text()


def test_a_sweeps_end_powers_off_no_host_it_cannot_ask(tmp_path: Path, monkeypatch: object) -> None:
    """A sweep's ``after: shutdown`` runs the shutdown command only on a host that answered it has no job
    running or waiting: one that cannot be asked is left on, said (it was an error ending the sweep's report)."""
    from gpujob import Client
    from gpujob.api.client import _SweepRunner
    from gpujob.config.hosts import Host, HostStore

    marker = tmp_path / "powered-off"
    HostStore().save(Host(name="away", hostname="127.0.0.1", port=dead_port(), connect_timeout=5,
                          shutdown_command=f"touch {marker}"))
    monkeypatch.setenv("GPUJOB_CONNECT_RETRIES", "1")  # type: ignore[attr-defined]
    with Client() as c:
        said = _SweepRunner(c).shutdown("away")
    assert said.startswith("not powered off: whether a job runs there could not be asked"), said
    assert not marker.exists()


def test_rm_of_a_lost_job_whose_trainer_still_runs_is_refused_unless_forced(tmp_path: Path) -> None:
    """A lost job (its supervisor killed) whose trainer goes on is live: ``rm`` without --force removed its
    folder under it (the job state `lost` is final), leaving a trainer that no gpujob stop could find, and
    the idle watcher (``busy``) took the host for idle and powered it off under the trainer."""
    from tests.helpers import job_processes, submit, write_job

    job_id = submit("local", write_job(tmp_path, "orphaned", "import time\ntime.sleep(600)\n", "python main.py"))["job_id"]
    root = Path(os.environ["GPUJOB_LOCAL_ROOT"])
    wait_state("local", job_id, ("running",), timeout=60)
    st = json.loads((root / "jobs" / job_id / "status.json").read_text())
    os.kill(st["supervisor_pid"], signal.SIGKILL)  # the agent dies, the trainer goes on
    wait_for(lambda: json.loads(run_cli("status", job_id, "--json").stdout)["state"] == "lost", 60, "lost")
    from remote.core.layout import Root
    from remote.run import power

    assert power.busy(Root(str(root))), "the idle watcher would power off under the trainer that goes on"
    r = run_cli("rm", job_id)
    assert r.returncode == 2 and "process(es) of it still run" in r.stderr and "--force" in r.stderr, r.stderr
    assert (root / "jobs" / job_id).is_dir() and job_processes(job_id)
    r = run_cli("rm", job_id, "--force", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["removed"][0]["stopped"] is True, r.stdout + r.stderr
    assert not (root / "jobs" / job_id).exists()
    wait_for(lambda: not job_processes(job_id), 30, "the orphaned trainer to be gone")
