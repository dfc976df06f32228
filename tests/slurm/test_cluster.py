"""The Slurm test cluster itself: jobs through its login node, a requeue, two nodes, nothing left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.slurm.cluster import PREFIX, Cluster, SlurmLogin, cluster_processes, start_cluster, stop_cluster


def wait_for(check: Callable[[], object], timeout: float, what: str, cluster: Cluster | None = None) -> object:
    """``check()``'s first true value, polled until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        v = check()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout} s" + (f"\n{cluster.log_tail()}" if cluster else ""))
        time.sleep(0.05)


def read(p: Path) -> str:
    try:
        return p.read_text()
    except OSError:
        return ""


def test_sbatch_through_login_node(slurm_login: SlurmLogin) -> None:
    job = slurm_login.sbatch(f"--chdir={slurm_login.shared}", "--wrap", "echo hi")
    assert slurm_login.cluster.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED"}, 30) == "COMPLETED"
    assert read(slurm_login.shared / f"slurm-{job}.out").strip() == "hi"


def test_requeue_restarts_at_once(slurm_cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "rq.out"
    r = slurm_cluster.run("sbatch", "--parsable", "--requeue", "--open-mode=append", f"--output={out}",
                          "--wrap", "echo run ${SLURM_RESTART_COUNT:-0}; exec sleep 300", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    wait_for(lambda: "run 0" in read(out), 30, "first run", slurm_cluster)
    t = time.monotonic()
    slurm_cluster.requeue(job)
    wait_for(lambda: "run 1" in read(out), 15, "the run after the requeue", slurm_cluster)  # not BeginTime's 2 min
    assert time.monotonic() - t < 10
    assert slurm_cluster.job_field(job, "Restarts") == "1"
    assert slurm_cluster.job_field(job, "JobState") == "RUNNING"


@pytest.mark.parametrize("slurm_cluster2", [{"kill_wait": 2, "max_time": "10:00", "partitions": [
    "PartitionName=small Nodes=n1,n2 MaxNodes=1 State=UP"]}], indirect=True)
def test_two_nodes(slurm_login2: SlurmLogin) -> None:
    c = slurm_login2.cluster
    r = slurm_login2.ssh("srun -N2 --ntasks-per-node=1 bash -c 'echo $SLURM_NODEID $SLURMD_NODENAME'")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["0 n1", "1 n2"]
    # the options: the debug partition's MaxTime, a second partition, KillWait
    assert sorted(c.run("sinfo", "-h", "-o", "%P %l %D").stdout.splitlines()) == ["debug* 10:00 2", "small infinite 2"]
    assert "MaxNodes=1 " in c.run("scontrol", "show", "partition", "small").stdout
    assert "KillWait                = 2 sec" in c.run("scontrol", "show", "config").stdout


def _slurm_processes_of(c: Cluster) -> list[str]:
    """Any process whose command line, environment or working folder names this cluster."""
    left = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            blob = Path(f"/proc/{d}/cmdline").read_bytes() + Path(f"/proc/{d}/environ").read_bytes()
            blob += os.readlink(f"/proc/{d}/cwd").encode()
        except OSError:
            continue
        if str(c.folder).encode() in blob or c.name.encode() in blob:
            left.append(f"{d}: {blob[:200]!r}")
    return left


def test_stop_leaves_nothing(tmp_path: Path) -> None:
    c = start_cluster(1, kill_wait=30)  # a job ignoring SIGTERM must not cost the 30 s
    try:
        pids = tmp_path / "pids"
        # one job ignores SIGTERM and leaves a setsid'd child behind; one waits for the CPUs
        r = c.run("sbatch", "--parsable", "-c2", "--wrap",
                  f"trap '' TERM; setsid sleep 300 & echo $$ $! > {pids}; sleep 300", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert c.run("sbatch", "--parsable", "-c2", "--wrap", "sleep 1", cwd=tmp_path).returncode == 0
        wait_for(lambda: len(read(pids).split()) == 2, 30, "the job's pids", c)
        job_pids = [int(p) for p in read(pids).split()]
        daemons = list(c.daemon_pids().values())
    finally:
        t = time.monotonic()
        stop_cluster(c)
        stopped_s = time.monotonic() - t
    from remote.core.procs import pid_alive

    assert not [p for p in daemons + job_pids if pid_alive(p)]
    assert not cluster_processes(c)
    assert not _slurm_processes_of(c)
    assert not c.folder.exists()
    assert stopped_s < 15


def test_leftovers_of_a_killed_run_are_cleaned(tmp_path: Path) -> None:
    """A test process killed with its cluster up: the next start ends that cluster and removes its folder."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.slurm.cluster import start_cluster; "
            "c = start_cluster(1); print(c.folder, c.name, flush=True); import time; time.sleep(300)")
    p = subprocess.Popen([sys.executable, "-c", code, str(Path(__file__).parents[2])], stdout=subprocess.PIPE, text=True)
    try:
        folder, name = (p.stdout.readline() if p.stdout else "").split()
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert Path(folder).name.startswith(PREFIX)
    orphan = Cluster(name=name, folder=Path(folder), conf=Path(folder) / "slurm.conf", ctld_port=0, node_ports={"n1": 0})
    assert cluster_processes(orphan)
    c = start_cluster(1)
    try:
        assert not cluster_processes(orphan)
        assert not Path(folder).exists()
    finally:
        stop_cluster(c)
