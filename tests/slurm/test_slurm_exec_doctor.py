"""``gpujob exec JOB`` and ``gpujob doctor`` on a real Slurm cluster (tests/slurm/cluster.py) through its login
node (a real sshd): a command runs as a step of the running job on its node, with the job's environment
and folder, its exit status passed through; a job that runs on no node is refused, naming its state;
doctor checks the cluster (client, controller, partition, GPUs, time limit, the root the compute nodes
share) and names an unknown partition. On an instance host, exec runs in the job's folder and environment."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.helpers import job_processes, remote_root, status, submit, wait_for, write_job
from tests.slurm.cluster import Cluster, SlurmLogin

pytestmark = pytest.mark.xdist_group("slurm")

# a job that says where it runs, then waits (no torch: the tests are about where a command runs)
WAITER = """
    import os, time
    print("up on", os.environ.get("SLURMD_NODENAME") or "this host", flush=True)
    deadline = time.time() + float(os.environ.get("UP_FOR", "300"))
    while time.time() < deadline:
        time.sleep(0.2)
"""


def _job(tmp_path: Path, name: str, **extra: object) -> Path:
    return write_job(tmp_path, name, WAITER, "python main.py", env={"MARK": f"mark-of-{name}"}, **extra)


def _log(root: Path, job_id: str) -> str:
    try:
        return (root / "jobs" / job_id / "output.log").read_text()
    except OSError:
        return ""


def _running(login: SlurmLogin, job_id: str) -> None:
    """Wait until the job's run command printed its first line (Slurm started it on a node)."""
    wait_for(lambda: "up on" in _log(login.shared, job_id), 90, lambda: _log(login.shared, job_id)[-2000:])


def _alive_in_slurm(c: Cluster) -> list[str]:
    r = c.run("squeue", "-h", "-o", "%i %T")
    return [ln.split()[0] for ln in r.stdout.splitlines() if ln.split()[1:] and ln.split()[1] not in ("COMPLETED", "CANCELLED")]


def _stop(host: str, *job_ids: str) -> None:
    for job_id in job_ids:
        r = run_cli("stop", job_id, "--host", host, "--json", timeout=180)
        assert r.returncode == 0 and json.loads(r.stdout)["state"] == "stopped", r.stderr + r.stdout


def test_exec_runs_on_the_jobs_node_with_its_environment_and_exit_code(slurm_login: SlurmLogin, tmp_path: Path) -> None:
    c = slurm_login.cluster
    res = submit(slurm_login.host, _job(tmp_path, "runner"))
    job_id, sid = res["job_id"], res["slurm_job"]
    _running(slurm_login, job_id)
    code = slurm_login.shared / "jobs" / job_id / "code"
    line = 'echo "node=$SLURMD_NODENAME slurm=$SLURM_JOB_ID"; printenv GPUJOB_JOB_ID MARK; pwd; echo oops >&2'
    r = run_cli("exec", job_id, "--", line)
    assert r.returncode == 0, r.stderr + r.stdout
    assert r.stdout.splitlines() == [f"node=n1 slurm={sid}", job_id, "mark-of-runner", str(code), "oops"], r.stdout
    assert "Traceback" not in r.stderr
    # the command's own exit status, its stdin passed on, its words quoted one by one
    assert run_cli("exec", job_id, "--", "echo partial; exit 3").returncode == 3
    r = run_cli("exec", job_id, "--", "tr", "a-z", "A-Z", input="piped in\n")
    assert r.returncode == 0 and r.stdout == "PIPED IN\n", r.stderr
    doc = json.loads(run_cli("exec", job_id, "--json", "--", "hostname; command -v python").stdout)
    assert doc["node"] == "n1" and doc["slurm_job"] == sid and doc["exit_code"] == 0 and doc["cwd"] == str(code), doc
    assert doc["output"].splitlines()[1] == str(Path(sys.executable).parent / "python"), doc  # the job's PATH prefix
    # the job ran on regardless, and no step of exec is left in Slurm
    assert status(slurm_login.host, job_id)["state"] == "running"

    def exec_steps() -> list[str]:  # srun's steps (numbered; the batch script's is "batch")
        return [s for s in c.run("squeue", "-h", "-s", "-j", sid, "-o", "%i").stdout.split() if s.split(".")[-1].isdigit()]

    wait_for(lambda: not exec_steps(), 15, lambda: f"exec's steps to end: {exec_steps()}")
    _stop(slurm_login.host, job_id)
    assert sid not in _alive_in_slurm(c) and not job_processes(job_id)


def _on_a_pty(args: list[str], keys: bytes, env: dict[str, str], timeout: float = 120) -> tuple[int, bytes]:
    """``gpujob ARGS`` on a pty (stdin, stdout and stderr), ``keys`` typed once its shell prompts; its
    exit status and every byte it wrote."""
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", *args], stdin=slave, stdout=slave, stderr=slave,
                         env=dict(os.environ, PYTHONPATH=str(REPO), TERM="dumb", **env), close_fds=True,
                         start_new_session=True)
    os.close(slave)
    out, typed = b"", False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the other end closed: the process is gone
                    break
                if not chunk:
                    break
                out += chunk
            elif p.poll() is not None:
                break
            if not typed and (b"$ " in out or b"# " in out):  # the shell's prompt
                os.write(master, keys)
                typed = True
        return p.wait(timeout=30), out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)


def test_exec_without_a_command_opens_a_shell_on_the_jobs_node(slurm_login: SlurmLogin, tmp_path: Path) -> None:
    res = submit(slurm_login.host, _job(tmp_path, "shelled"))
    job_id, sid = res["job_id"], res["slurm_job"]
    _running(slurm_login, job_id)
    keys = b'echo "at=$SLURMD_NODENAME/$SLURM_JOB_ID/$GPUJOB_JOB_ID/$MARK/$PWD"; exit 5\n'
    rc, out = _on_a_pty(["exec", job_id], keys, {"HOME": str(tmp_path / "home")})
    code = slurm_login.shared / "jobs" / job_id / "code"
    assert f"at=n1/{sid}/{job_id}/mark-of-shelled/{code}".encode() in out, out[-3000:]
    assert rc == 5, out[-3000:]
    _stop(slurm_login.host, job_id)
    assert not job_processes(job_id) and sid not in _alive_in_slurm(slurm_login.cluster)


@pytest.mark.parametrize("slurm_cluster", [{"kill_wait": 2}], indirect=True)
def test_exec_of_a_job_on_no_node_is_refused_naming_its_state(slurm_login: SlurmLogin, tmp_path: Path) -> None:
    first = submit(slurm_login.host, _job(tmp_path, "holder", slurm={"cpus": 2}))
    _running(slurm_login, first["job_id"])
    second = submit(slurm_login.host, _job(tmp_path, "waiter", slurm={"cpus": 2}))
    assert second["state"] == "pending", second
    r = run_cli("exec", second["job_id"], "--", "echo ran")
    said = r.stderr + r.stdout
    assert r.returncode != 0 and "ran" not in r.stdout, said
    assert "pending in Slurm" in said and second["slurm_job"] in said and f"gpujob status {second['job_id']}" in said, said
    assert "Traceback" not in said
    # the shell (on a terminal) is refused the same way, before the terminal is handed over
    rc, out = _on_a_pty(["exec", second["job_id"]], b"", {"HOME": str(tmp_path / "home")})
    assert rc == 2 and b"pending in Slurm" in out and b"Traceback" not in out, out
    assert not (tmp_path / "home").exists()  # no ssh entry written: ssh was never started
    # an ended job: no node either
    _stop(slurm_login.host, first["job_id"])
    r = run_cli("exec", first["job_id"], "--", "echo ran")
    said = r.stderr + r.stdout
    assert r.returncode != 0 and "not running in Slurm" in said and f"gpujob resume {first['job_id']}" in said, said
    _stop(slurm_login.host, second["job_id"])
    assert not _alive_in_slurm(slurm_login.cluster)
    assert not job_processes(first["job_id"]) and not job_processes(second["job_id"])


def _checks(r: subprocess.CompletedProcess) -> dict[str, dict]:
    doc = json.loads(r.stdout)
    return {c["name"]: c for c in doc["checks"]}


def test_doctor_checks_the_cluster_and_names_an_unknown_partition(slurm_login: SlurmLogin) -> None:
    r = run_cli("doctor", slurm_login.host, "--json", timeout=300)
    checks = _checks(r)
    slurm = {k: checks[k] for k in ("slurm", "slurm ctld", "partition", "node gpus", "time limit", "shared root",
                                    "node python")}
    assert {k: c["level"] for k, c in slurm.items()} == {
        "slurm": "ok", "slurm ctld": "ok", "partition": "ok", "node gpus": "warn", "time limit": "ok",
        "shared root": "ok", "node python": "ok"}, slurm
    assert "debug" in slurm["partition"]["message"] and "UP" in slurm["partition"]["message"]
    assert "n1" in slurm["shared root"]["message"] and str(slurm_login.shared) in slurm["shared root"]["message"]
    # what makes no sense on a login node is skipped, saying why, never failed
    for name in ("gpu", "disk:data", "power"):
        assert checks[name]["level"] == "ok" and checks[name]["message"].startswith("skipped:"), checks[name]
    assert not list((slurm_login.shared / "cache").glob("doctor-*"))  # the token is gone
    assert not _alive_in_slurm(slurm_login.cluster)

    assert run_cli("host", "set", slurm_login.host, "--partition", "nosuch", "--no-check").returncode == 0
    r = run_cli("doctor", slurm_login.host, "--json", timeout=300)
    assert r.returncode == 1, r.stderr
    part = _checks(r)["partition"]
    assert part["level"] == "error" and "'nosuch'" in part["message"] and "debug" in part["message"], part
    assert f"gpujob host set {slurm_login.host} --partition" in part["remedy"], part
    shown = run_cli("doctor", slurm_login.host, timeout=300)
    assert shown.returncode == 1 and "nosuch" in shown.stdout and "Traceback" not in shown.stderr + shown.stdout


def test_doctor_leaves_the_shared_root_unchecked_while_the_partition_is_busy(slurm_login: SlurmLogin,
                                                                           tmp_path: Path) -> None:
    holder = submit(slurm_login.host, _job(tmp_path, "busy", slurm={"cpus": 2}))  # both CPUs of the one node
    _running(slurm_login, holder["job_id"])
    r = run_cli("doctor", slurm_login.host, "--json", timeout=300, env_extra={"GPUJOB_DOCTOR_SLURM_WAIT": "2"})
    shared = _checks(r)["shared root"]
    assert shared["level"] == "warn" and "not checked: the partition is busy" in shared["message"], shared
    assert _alive_in_slurm(slurm_login.cluster) == [holder["slurm_job"]]  # the test job's request was withdrawn
    _stop(slurm_login.host, holder["job_id"])
    assert not job_processes(holder["job_id"])


def test_exec_on_an_instance_runs_in_the_jobs_folder_with_its_environment(any_host: str, tmp_path: Path) -> None:
    job_id = submit(any_host, _job(tmp_path, "plain"))["job_id"]
    root = remote_root(tmp_path, any_host)
    wait_for(lambda: "up on" in _log(root, job_id), 60, lambda: _log(root, job_id)[-2000:])
    r = run_cli("exec", job_id, "--", "pwd; printenv GPUJOB_JOB_ID MARK GPUJOB_CKPT_DIR; command -v python")
    assert r.returncode == 0, r.stderr + r.stdout
    code = root.resolve() / "jobs" / job_id / "code"
    assert r.stdout.splitlines() == [str(code), job_id, "mark-of-plain", str(code.parent / "ckpt"),
                                     str(Path(sys.executable).parent / "python")], r.stdout
    assert run_cli("exec", job_id, "--host", any_host, "--", "exit 3").returncode == 3
    doc = json.loads(run_cli("exec", job_id, "--json", "--", "echo hi").stdout)
    assert doc["output"] == "hi\n" and doc["node"] is None and doc["job_id"] == job_id, doc
    # no command: an interactive shell there (the same folder, environment and interpreter)
    keys = b'echo "at=$GPUJOB_JOB_ID/$MARK/$PWD/$(command -v python)"; exit 4\n'
    rc, out = _on_a_pty(["exec", job_id], keys, {"HOME": str(tmp_path / "home")})
    assert f"at={job_id}/mark-of-plain/{code}/{Path(sys.executable).parent / 'python'}".encode() in out, out[-3000:]
    assert rc == 4, out[-3000:]
    r = run_cli("exec", "nosuch-job", "--", "true")
    assert r.returncode != 0 and "neither a host profile nor a job" in r.stderr and "Traceback" not in r.stderr, r.stderr
    _stop(any_host, job_id)
    assert not job_processes(job_id)
