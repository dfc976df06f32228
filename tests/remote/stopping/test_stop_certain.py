"""`stop` is done when the job's processes are gone (issue 24 item 1, issue 30 item 2): through the
real CLI on `local`, with real processes — a supervisor frozen by SIGSTOP, a daemon that left the
job's session, environment and folder (double fork, setsid, chdir /, execve with an empty
environment), a script that catches the stop and carries on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.helpers import status, submit, wait_for, wait_state, write_job

LOOP = """
    import os, signal, sys, time

    def daemon(pidfile):
        # what data-loader daemons and nohup wrappers do: leave the session, the folder, the environment
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.chdir("/")
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                with open(pidfile + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.rename(pidfile + ".tmp", pidfile)
                os.execve("/bin/sleep", ["sleep", "600"], {})
            os._exit(0)
        os.wait()

    if len(sys.argv) > 1:
        daemon(sys.argv[1])
    step = 0
    while True:
        step += 1
        print(f"step {step}", flush=True)
        time.sleep(0.2)
"""


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def job_dir(tmp_path: Path, job_id: str) -> Path:
    return tmp_path / "local-root" / "jobs" / job_id


def started(tmp_path: Path, job: Path, steps: int = 3) -> tuple[str, Path, dict]:
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, job_id)
    wait_for(lambda: (jd / "output.log").exists() and f"step {steps}\n" in (jd / "output.log").read_text(), 60,
             lambda: (jd / "output.log").read_text() if (jd / "output.log").exists() else "no log")
    return job_id, jd, json.loads((jd / "status.json").read_text())


def trainer(jd: Path) -> int:
    from remote.core.procs import _cmdline, _parents

    for pid in _parents():
        if b"main.py" in _cmdline(pid) and b"python" in _cmdline(pid).split(b"\0")[0]:
            if f"GPUJOB_JOB_DIR={jd}\0".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                return pid
    raise AssertionError("no trainer")


def kill(pid: int | None) -> None:
    if pid:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except OSError:
                pass


def test_stop_acts_itself_when_the_supervisor_is_frozen(tmp_path: Path) -> None:
    job = write_job(tmp_path, "frozen", LOOP, "python main.py", stop={"grace": "5s"})
    job_id, jd, st = started(tmp_path, job)
    sup, train = st["supervisor_pid"], trainer(jd)
    os.kill(sup, signal.SIGSTOP)  # a stuck NFS read, a debugger
    try:
        # status says more than "running": nothing would record the job's end while it is frozen
        (tmp_path / "local-root" / "agent.env").write_text("GPUJOB_STALE_AFTER=1\n")
        wait_for(lambda: "SIGSTOP" in (status("local", job_id).get("supervisor_note") or ""), 30, "the note")
        r = run_cli("status", job_id)
        assert r.returncode == 0 and f"its supervisor (pid {sup}) is stopped (SIGSTOP)" in " ".join(r.stdout.split())
        r = run_cli("stop", job_id, "--wait", "30", timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "stopped (ended by the stop command itself: the supervisor" in r.stdout and "SIGSTOP" in r.stdout
        assert not alive(train) and not alive(sup)  # the frozen supervisor too: resume may start a new one
        doc = status("local", job_id)
        assert doc["state"] == "stopped" and not doc.get("survivors"), doc
        assert "the stop command signals the job's processes itself" in (jd / "output.log").read_text()
    finally:
        kill(sup)


def test_a_daemon_that_left_the_job_is_ended_by_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUJOB_NO_CGROUP", "1")  # found as the supervisor's orphan (it is a child subreaper)
    pidfile = tmp_path / "daemon.pid"
    job = write_job(tmp_path, "daemon", LOOP, f"python main.py {pidfile}", stop={"grace": "5s"})
    job_id, jd, st = started(tmp_path, job)
    wait_for(pidfile.exists, 30, "the daemon's pid")
    daemon = int(pidfile.read_text())
    try:
        assert Path(f"/proc/{daemon}/environ").read_bytes() == b"" and os.readlink(f"/proc/{daemon}/cwd") == "/"
        r = run_cli("stop", job_id, "--wait", "30", timeout=90)
        assert r.returncode == 0 and "stopped" in r.stdout, r.stdout + r.stderr
        assert not alive(daemon), "stop said stopped while the daemon runs"
        assert "note: no per-job cgroup (GPUJOB_NO_CGROUP is set)" in r.stderr, r.stderr  # what it rests on
    finally:
        kill(daemon)


@pytest.mark.parametrize("by", ["cgroup", "gpu"])
def test_a_daemon_is_found_after_the_supervisor_died(by: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its parent chain is gone (the supervisor SIGKILLed, the daemon now init's): the job's cgroup,
    or the GPU's compute processes (an nvidia-smi stand-in on PATH) still name it."""
    from remote.stopping import cgroup

    if by == "cgroup":
        where, why = cgroup.create(str(tmp_path / "probe"))
        cgroup.remove(where)
        if not where:
            pytest.skip(f"this host allows no cgroup: {why}")
    else:
        monkeypatch.setenv("GPUJOB_NO_CGROUP", "1")
        monkeypatch.setenv("PATH", f"{REPO / 'tests' / 'stand_ins'}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_SMI_COMPUTE_PIDS", str(tmp_path / "gpu.pids"))
    pidfile = tmp_path / "daemon.pid"
    gpus = {"gpus": 1} if by == "gpu" else {}  # GPU processes count for a job given GPUs only
    job = write_job(tmp_path, "orphan", LOOP, f"python main.py {pidfile}", stop={"grace": "5s"}, **gpus)
    job_id, jd, st = started(tmp_path, job)
    wait_for(pidfile.exists, 30, "the daemon's pid")
    daemon = int(pidfile.read_text())
    (tmp_path / "gpu.pids").write_text(f"{daemon}\n")
    try:
        kill(st["supervisor_pid"])
        r = run_cli("stop", job_id, "--wait", "30", timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        assert not alive(daemon), f"the daemon survived stop ({r.stdout})"
    finally:
        kill(daemon)


CATCHER = """
    import time
    step = 0
    try:
        while True:
            step += 1
            print(f"step {step}", flush=True)
            time.sleep(0.2)
    except KeyboardInterrupt:
        print("interrupted: final evaluation", flush=True)
    while {carry_on}:  # a trainer that ignores the stop and goes on
        time.sleep(0.2)
    print("done", flush=True)
"""


@pytest.mark.parametrize("carry_on", [False, True])
def test_a_script_that_catches_the_stop_ends_stopped(carry_on: bool, tmp_path: Path) -> None:
    job = write_job(tmp_path, "catch", CATCHER.replace("{carry_on}", str(carry_on)), "python main.py",
                    stop={"grace": "2s"})
    job_id, jd, _ = started(tmp_path, job)
    if carry_on:  # Ctrl-C while stop waits out the grace: said (it exited 130 in silence), and the stop goes on
        p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "stop", job_id, "--wait", "30"], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(REPO)))
        wait_for(lambda: (jd / "STOP").exists(), 60, "the stop request")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 130 and "Traceback" not in err, out + err
        assert "stop interrupted: the stop may already have reached the host" in err and f"gpujob status {job_id}" in err
        wait_state("local", job_id, ("stopped",), 60)
    else:
        r = run_cli("stop", job_id, "--wait", "30", timeout=90)
        assert r.returncode == 0 and f"{job_id}: stopped" in r.stdout, r.stdout + r.stderr
    st = status("local", job_id)
    log = (jd / "output.log").read_text()
    assert st["state"] == "stopped", st  # never succeeded
    if carry_on:
        assert "stop: still running after the grace: SIGKILL of pid(s)" in log, log[-1500:]
    else:
        assert st["exit_code"] == 0 and "done" in log
        assert "the run command exited with code 0 after the stop request (it caught the stop" in log, log[-1500:]


def test_a_setup_outlives_its_killed_supervisor_and_keeps_the_lock(tmp_path: Path) -> None:
    """Issue 24 item 9: the supervisor SIGKILLed during a slow ``setup:``; a second job of the same
    environment hash waits for that setup to end instead of running its own beside it."""
    trace, gate = tmp_path / "setup.trace", tmp_path / "gate"
    setup = f"echo start $$ >> {trace}; while [ ! -e {gate} ]; do sleep 0.1; done; echo end $$ >> {trace}"
    job = write_job(tmp_path, "slowsetup", "print('ran')\n", "python main.py", setup=setup)
    first = submit("local", job)["job_id"]
    wait_for(lambda: trace.exists() and "start" in trace.read_text(), 60, "the first setup")
    kill(json.loads((job_dir(tmp_path, first) / "status.json").read_text())["supervisor_pid"])
    second = submit("local", job)["job_id"]
    log = job_dir(tmp_path, second) / "output.log"
    wait_for(lambda: log.exists() and "waiting: another job is provisioning environment" in log.read_text(), 60,
             lambda: log.read_text() if log.exists() else "no log")
    assert trace.read_text().count("start") == 1  # the orphaned setup still holds the lock
    gate.touch()
    from tests.helpers import wait_state

    assert wait_state("local", second, ("succeeded", "failed"), 90)["state"] == "succeeded"
    events = [line.split()[0] for line in trace.read_text().splitlines()]
    assert events == ["start", "end", "start", "end"], trace.read_text()  # never two at once


SAVER = """
    import os, signal, time, zipfile
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a plain loop that saves every {every} steps, never on a signal
    ck, resume = os.environ["GPUJOB_CKPT_DIR"], os.environ.get("GPUJOB_RESUME")
    gate = os.environ.get("GATE")  # after two saves, the next waits until the test creates this file
    step = 0
    if resume:
        with zipfile.ZipFile(resume) as z:
            step = int(z.read("step"))
        print(f"resumed at step {step}", flush=True)
    while True:
        step += 1
        print(f"step {step}", flush=True)
        time.sleep(0.1)
        if {every} and step % {every} == 0 and (not gate or step <= 2 * {every} or os.path.exists(gate)):
            with zipfile.ZipFile(os.path.join(ck, "tmp.zip"), "w") as z:
                z.writestr("step", str(step))
            os.rename(os.path.join(ck, "tmp.zip"), os.path.join(ck, f"ckpt_{step}.pt"))
"""


def steps_in(log: Path) -> int:
    return max([int(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("step ")] or [0])


def test_stop_after_checkpoint_keeps_the_work_and_resume_goes_on(tmp_path: Path) -> None:
    """Issue 30 item 1: ``stop --after-checkpoint`` leaves a checkpoint newer than the request,
    ``status`` shows the wait meanwhile, and ``resume`` continues from that checkpoint."""
    gate = tmp_path / "gate"  # the third save waits for it: status sees the wait however slow the machine
    job = write_job(tmp_path, "saver", SAVER.replace("{every}", "25"), "python main.py", stop={"grace": "5s"},
                    env={"GATE": str(gate)})
    job_id, jd, _ = started(tmp_path, job, steps=55)  # ckpt_25 and ckpt_50: every ~2.5 s
    asked = steps_in(jd / "output.log")
    r = run_cli("stop", job_id, "--after-checkpoint", "--wait", "0")  # no --max-wait: twice the interval, >= 60 s
    assert r.returncode == 7 and "stopping after the next checkpoint (last one" in r.stderr, r.stdout + r.stderr
    shown = run_cli("status", job_id)
    assert "stopping after the next checkpoint (last one" in shown.stdout and ", every ~" in shown.stdout \
        and "twice the usual interval" in shown.stdout, shown.stdout
    gate.touch()
    r = run_cli("stop", job_id, "--after-checkpoint", "--max-wait", "60s", "--wait", "60", timeout=120)
    assert r.returncode == 0 and f"{job_id}: stopped" in r.stdout, r.stdout + r.stderr
    st = status("local", job_id)
    newest = [c["name"] for c in st["checkpoints"] if c["complete"]][-1]
    saved = int(newest[len("ckpt_"):-len(".pt")])
    assert saved > asked, (saved, asked)  # written after the request: nothing since is lost
    assert "(after checkpoint ckpt_" in st["reason"] and steps_in(jd / "output.log") < saved + 25
    assert run_cli("resume", job_id).returncode == 0
    wait_for(lambda: f"resumed at step {saved}\n" in (jd / "output.log").read_text(), 60, "the resumed attempt")
    assert run_cli("stop", job_id, "--wait", "30").returncode == 0


def test_stop_after_checkpoint_of_a_loop_deaf_to_signals_ends_it_within_seconds_of_the_checkpoint(
        tmp_path: Path) -> None:
    """Issue 35: once the checkpoint asked for is complete nothing is left to save. A loop that ignores
    SIGINT and SIGTERM, in a 30 s grace, trained on through the whole grace (work SIGKILL then lost);
    it now ends within seconds of the checkpoint: measured by the job's own records (the checkpoint's
    mtime, the job's ended_at), never by the test's clock."""
    deaf = SAVER.replace("signal.signal(signal.SIGINT, signal.SIG_IGN)",
                         "signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    job = write_job(tmp_path, "deafsaver", deaf.replace("{every}", "30"), "python main.py", stop={"grace": "30s"})
    job_id, jd, _ = started(tmp_path, job)
    train = trainer(jd)
    r = run_cli("stop", job_id, "--after-checkpoint", "--max-wait", "90s", "--wait", "120", timeout=180)
    assert r.returncode == 0 and f"{job_id}: stopped" in r.stdout, r.stdout + r.stderr
    st = status("local", job_id)
    assert "(after checkpoint ckpt_" in st["reason"], st["reason"]
    asked = st["reason"].split("(after checkpoint ")[1].rstrip(")")  # the one the stop waited for
    landed = (jd / "ckpt" / asked).stat().st_mtime
    assert st["ended_at"] - landed < 10, (st["ended_at"] - landed, (jd / "output.log").read_text()[-2000:])
    assert not alive(train)
    log = (jd / "output.log").read_text()
    assert "nothing is left to save" in log and "SIGKILL" in log, log[-2000:]


def test_stop_after_checkpoint_gives_up_after_max_wait_saying_what_is_lost(tmp_path: Path) -> None:
    job = write_job(tmp_path, "nosaver", SAVER.replace("{every}", "0"), "python main.py", stop={"grace": "5s"})
    job_id, jd, _ = started(tmp_path, job)
    r = run_cli("stop", job_id, "--after-checkpoint", "--max-wait", "2s", "--wait", "30", timeout=90)
    assert r.returncode == 0 and f"{job_id}: stopped" in r.stdout, r.stdout + r.stderr
    st = status("local", job_id)
    assert "no new checkpoint within 2 s: no checkpoint was ever written" in st["reason"], st["reason"]
    assert "stop: no new checkpoint within 2 s: stopping anyway" in (jd / "output.log").read_text()


def test_autostop_in_checkpoint_mode_waits_for_the_next_checkpoint(tmp_path: Path) -> None:
    """``stop: {mode: checkpoint}`` in the job file: an auto-stop waits for the next save."""
    job = write_job(tmp_path, "autosaver", SAVER.replace("{every}", "40"), "python main.py",
                    stop={"grace": "5s", "mode": "checkpoint", "max_wait": "60s"}, autostop={"max_runtime": "2s"})
    job_id = submit("local", job)["job_id"]
    from tests.helpers import wait_state

    st = wait_state("local", job_id, ("autostopped", "stopped", "failed"), 90)
    assert st["state"] == "autostopped" and "(after checkpoint ckpt_" in st["reason"], st
    log = (job_dir(tmp_path, job_id) / "output.log").read_text()
    assert "stopping after the next checkpoint" in log and steps_in(job_dir(tmp_path, job_id) / "output.log") >= 40


def test_stop_that_cannot_finish_in_its_wait_says_so_and_names_the_processes(tmp_path: Path) -> None:
    """Never "stopped" while something runs: a script deaf to SIGINT and SIGTERM, in a 60 s grace,
    outlasts ``--wait 2``; the command exits 7 naming its processes (it printed "running", exit 0)."""
    deaf = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" \
           "step = 0\nwhile True:\n    step += 1\n    print(f'step {step}', flush=True)\n    time.sleep(0.2)\n"
    job = write_job(tmp_path, "deaf", deaf, "python main.py", stop={"grace": "60s"})
    job_id, jd, _ = started(tmp_path, job)
    train = trainer(jd)
    r = run_cli("stop", job_id, "--wait", "2")
    assert r.returncode == 7 and f"{job_id}: running" in r.stdout, r.stdout + r.stderr
    assert f"{job_id} has not stopped yet" in r.stderr and str(train) in r.stderr, r.stderr


# issue 35: a script that ended on its own is finished, whatever stop came later
ENDS_AT_GATE = """
    import os, sys, time
    for i in range(1, 4):
        print(f"step {i}", flush=True)
    while not os.path.exists(sys.argv[1]):  # its last lines (a final evaluation): then it ends by itself
        time.sleep(0.05)
    print("all steps done", flush=True)
"""

HELPER_ENDS_AT_GATE = """
    import os, sys, time
    import gpujob_runtime as gj
    for i in range(1, 4):
        if gj.should_stop():
            print("told to stop", flush=True)
            sys.exit(0)
        print(f"step {i}", flush=True)
    while not os.path.exists(sys.argv[1]):  # the final evaluation, after the last step: the stop lands here
        time.sleep(0.05)
    print("all steps done", flush=True)
"""

HELPER_ACTS = """
    import sys, time
    import gpujob_runtime as gj
    i = 0
    while True:
        i += 1
        if gj.should_stop():
            print("told to stop at", i, flush=True)
            sys.exit(0)
        print(f"step {i}", flush=True)
        time.sleep(0.05)
"""


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_script_that_ended_before_the_stop_reached_its_supervisor_succeeded(tmp_path: Path) -> None:
    """The sweep's budget stop lands after the trial's script exited 0 but before its supervisor
    looked (held still here with SIGSTOP, as a busy host would): it was "stopped by user"."""
    gate = tmp_path / "gate"
    job = write_job(tmp_path, "ended", ENDS_AT_GATE, f"python main.py {gate}")
    job_id, jd, st = started(tmp_path, job)
    sup, child = st["supervisor_pid"], st["child_pid"]
    os.kill(sup, signal.SIGSTOP)
    try:
        gate.touch()
        wait_for(lambda: _zombie(child), 60, "the run command's end")
        r = run_cli("stop", job_id, "--wait", "0")
        assert (jd / "STOP").exists(), r.stdout + r.stderr
    finally:
        os.kill(sup, signal.SIGCONT)
    st = wait_state("local", job_id, ("succeeded", "stopped"), 60)
    log = (jd / "output.log").read_text()
    assert st["state"] == "succeeded" and st["exit_code"] == 0, (st, log[-1500:])
    assert "had ended on its own (exit 0) when the stop (stopped by user) reached it" in log, log[-1500:]


def test_a_helper_script_that_finishes_its_steps_after_a_stop_request_succeeded(tmp_path: Path) -> None:
    """The stop request lands during the last lines of a script using gpujob's runtime helper (its
    loop over, the helper never told it to stop): it ends by itself, so it succeeded. A script the
    helper did tell to stop is stopped, as before."""
    gate = tmp_path / "gate"
    job = write_job(tmp_path, "late", HELPER_ENDS_AT_GATE, f"python main.py {gate}", stop={"grace": "60s"})
    job_id, jd, _ = started(tmp_path, job)
    wait_for(lambda: "all steps" in (jd / "output.log").read_text() or (jd / "STOP.watch").exists(), 60, "its watch")
    r = run_cli("stop", job_id, "--wait", "0")
    assert (jd / "STOP").exists(), r.stdout + r.stderr
    wait_for(lambda: json.loads((jd / "status.json").read_text()).get("stopping"), 60, "the supervisor acting on it")
    gate.touch()
    st = wait_state("local", job_id, ("succeeded", "stopped"), 60)
    log = (jd / "output.log").read_text()
    assert st["state"] == "succeeded" and "all steps done" in log and "told to stop" not in log, (st, log[-1500:])

    job = write_job(tmp_path, "acts", HELPER_ACTS, "python main.py", stop={"grace": "60s"})
    job_id, jd, _ = started(tmp_path, job)
    r = run_cli("stop", job_id, "--wait", "60", timeout=120)
    st = status("local", job_id)
    assert st["state"] == "stopped" and "told to stop" in (jd / "output.log").read_text(), (st, r.stdout + r.stderr)
