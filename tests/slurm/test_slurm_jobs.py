"""Jobs on a real Slurm cluster (tests/slurm/cluster.py) through its login node (a real sshd): the same
job file, ``submit``, ``status``, ``ls``, ``stop``, ``resume``. Slurm decides liveness and placement;
gpujob keeps the work: a requeue in the middle (what a preemption does) resumes from the newest
checkpoint and is never shown ``lost`` or ``failed``."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import job_processes, needs, status, submit, wait_for, write_job
from tests.slurm.cluster import Cluster, SlurmLogin

# a tiny torch model trained by a plain loop that saves every 5 steps (renamed into place) and loads
# GPUJOB_RESUME when gpujob hands it one; nothing of gpujob imported
TRAIN = """
    import os, time
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    steps = int(os.environ.get("STEPS", "40"))
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ck, start = os.environ["GPUJOB_CKPT_DIR"], 0
    if os.environ.get("GPUJOB_RESUME"):
        st = torch.load(os.environ["GPUJOB_RESUME"])
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start = st["step"]
    print(f"start at step {start} on {os.environ.get('SLURMD_NODENAME')}", flush=True)
    x = torch.randn(64, 4)
    y = x.sum(1, keepdim=True)
    for step in range(start + 1, steps + 1):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}/{steps} loss={loss.item():.4f}", flush=True)
        if step % 5 == 0:
            path = os.path.join(ck, f"step{step:04d}.pt")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, path + ".tmp")
            os.replace(path + ".tmp", path)
        time.sleep(float(os.environ.get("SLOW", "0.2")))
"""

def _job(tmp_path: Path, name: str, steps: int = 40, slow: float = 0.2, **extra: object) -> Path:
    return write_job(tmp_path, name, TRAIN, "python main.py", env={"STEPS": str(steps), "SLOW": str(slow)},
                     checkpoint={"pattern": "step*.pt"}, **extra)

def _log(login: SlurmLogin, job_id: str) -> str:
    try:
        return (login.shared / "jobs" / job_id / "output.log").read_text()
    except OSError:
        return ""

def _alive_in_slurm(c: Cluster) -> list[str]:
    """Job ids Slurm still runs or holds (squeue lists ended ones too for a while with --states=all)."""
    r = c.run("squeue", "-h", "-o", "%i %T")
    return [ln.split()[0] for ln in r.stdout.splitlines() if ln.split()[1:] and ln.split()[1] not in ("COMPLETED", "CANCELLED")]

def test_a_job_runs_in_slurm_under_its_id_and_a_requeue_resumes_it_from_its_checkpoint(
        slurm_login: SlurmLogin, tmp_path: Path) -> None:
    needs("torch")
    c = slurm_login.cluster
    res = submit(slurm_login.host, _job(tmp_path, "tiny", steps=40))
    job_id, sid = res["job_id"], res["slurm_job"]
    assert res["state"] in ("pending", "queued", "running"), res
    assert c.run("squeue", "-h", "-j", sid, "-o", "%j").stdout.strip() == f"gpujob:{job_id}"  # Slurm's name holds ours
    wait_for(lambda: "step 12/" in _log(slurm_login, job_id), 90, lambda: _log(slurm_login, job_id)[-2000:])
    c.requeue(sid)  # what a preemption does: the job's processes are signalled, then it is queued again
    seen = set()

    def ended() -> bool:
        st = status(slurm_login.host, job_id)
        seen.add(st["state"])
        return st["state"] in ("succeeded", "failed", "stopped", "lost")

    wait_for(ended, 120, lambda: f"{seen}\n{_log(slurm_login, job_id)[-3000:]}", interval=1.0)
    st = status(slurm_login.host, job_id)
    assert st["state"] == "succeeded", (seen, _log(slurm_login, job_id)[-3000:])
    assert not seen & {"lost", "failed"}, seen  # a requeue is never shown as a loss
    log = _log(slurm_login, job_id)
    resumed = [int(ln.split()[3]) for ln in log.splitlines() if ln.startswith("start at step")]
    assert resumed[0] == 0 and len(resumed) == 2 and resumed[1] >= 10, log[-3000:]  # its newest checkpoint, not step 0
    assert "requeued by Slurm" in log and "step 40/40" in log
    assert st["requeues"] == 1 and st["slurm_job"] == sid and st["attempt"] == 2
    # the Slurm host as any other: ls, runs and cost list it
    ls = json.loads(run_cli("ls", "--host", slurm_login.host, "--json").stdout)
    assert [j["state"] for j in ls["jobs"] if j["job_id"] == job_id] == ["succeeded"], ls
    runs = run_cli("runs", "--json")
    assert runs.returncode == 0 and job_id in runs.stdout, runs.stderr
    cost = run_cli("cost", "--json")
    assert cost.returncode == 0 and slurm_login.host in cost.stdout, cost.stderr + cost.stdout
    assert not job_processes(job_id) and sid not in _alive_in_slurm(c)
    # its files through the login node, as on an instance: tail, pull (the newest checkpoint loads), rm
    tail = run_cli("tail", job_id, "--host", slurm_login.host, "-n", "3")
    assert tail.returncode == 0 and "step 40/40" in tail.stdout, tail.stderr
    pulled = run_cli("pull", job_id, str(tmp_path / "pulls"), "--host", slurm_login.host, "--latest")
    assert pulled.returncode == 0, pulled.stderr
    import torch

    newest = sorted((tmp_path / "pulls" / job_id).rglob("step*.pt"))[-1]
    assert torch.load(newest)["step"] == 40
    gone = run_cli("rm", job_id, "--host", slurm_login.host)
    assert gone.returncode == 0 and not (slurm_login.shared / "jobs" / job_id).exists(), gone.stderr

@pytest.mark.parametrize("slurm_cluster", [{"kill_wait": 5}], indirect=True)
def test_a_job_waiting_for_the_node_is_pending_with_slurms_reason_and_stop_leaves_nothing(
        slurm_login: SlurmLogin, tmp_path: Path) -> None:
    needs("torch")
    c = slurm_login.cluster
    first = submit(slurm_login.host, _job(tmp_path, "first", steps=10_000, slurm={"cpus": 2}))
    wait_for(lambda: "step 6/" in _log(slurm_login, first["job_id"]), 90,
             lambda: _log(slurm_login, first["job_id"])[-2000:])
    second = submit(slurm_login.host, _job(tmp_path, "second", steps=10_000, slurm={"cpus": 2}))
    assert second["state"] == "pending", second
    said: dict = {}

    def reason() -> object:  # Slurm names it at its next scheduling pass
        said.update(status(slurm_login.host, second["job_id"]))
        return said["state"] == "pending" and said["slurm"].get("reason")

    wait_for(reason, 30, lambda: str(said))
    st = said
    assert st["slurm"]["reason"] in ("Resources", "Priority"), st
    shown = run_cli("status", second["job_id"], "--host", slurm_login.host)
    assert "pending" in shown.stdout and st["slurm"]["reason"] in shown.stdout, shown.stdout
    ls = json.loads(run_cli("ls", "--host", slurm_login.host, "--json").stdout)
    assert {j["job_id"]: j["state"] for j in ls["jobs"]} == {first["job_id"]: "running", second["job_id"]: "pending"}
    _dashboard_lists(tmp_path, {first["job_id"]: "running", second["job_id"]: "pending"})

    stopped = run_cli("stop", first["job_id"], "--host", slurm_login.host, "--json", timeout=180)
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["state"] == "stopped"
    assert first["slurm_job"] not in _alive_in_slurm(c) and not job_processes(first["job_id"])
    # the node is free: the second starts; a resume of the first goes back to the queue from its checkpoint
    wait_for(lambda: status(slurm_login.host, second["job_id"])["state"] == "running", 60, "the second job to start")
    resumed = run_cli("resume", first["job_id"], "--host", slurm_login.host, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert status(slurm_login.host, first["job_id"])["state"] == "pending"
    for job in (second, first):
        r = run_cli("stop", job["job_id"], "--host", slurm_login.host, "--json", timeout=180)
        assert r.returncode == 0 and json.loads(r.stdout)["state"] == "stopped", r.stderr + r.stdout
    assert not _alive_in_slurm(c), c.run("squeue", "-h").stdout
    assert not job_processes(first["job_id"]) and not job_processes(second["job_id"])

def _dashboard_lists(tmp_path: Path, want: dict[str, str]) -> None:
    """The dashboard's job list (``gpujob ui``, its JSON API) shows the Slurm host's jobs as any host's."""
    needs("starlette", "uvicorn")
    import urllib.request

    from tests.gpujob.dashboard.test_dashboard import start_ui

    p, info = start_ui(tmp_path, "--interval", "1")
    try:
        token = info["url"].split("token=", 1)[1]
        got: dict = {}

        def listed() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{info['port']}/api/jobs?token={token}", timeout=30) as r:
                got.update(json.load(r))
            return {j.get("job_id"): j.get("state") for j in got.get("jobs", []) if j.get("host") == "cluster"} == want

        wait_for(listed, 60, lambda: str(got)[:2000])
    finally:
        p.terminate()
        p.wait(timeout=10)


def test_an_unknown_partition_is_refused_at_submit_naming_it_with_nothing_queued(
        slurm_login: SlurmLogin, tmp_path: Path) -> None:
    r = run_cli("host", "set", slurm_login.host, "--partition", "nosuch", "--no-check")
    assert r.returncode == 0, r.stderr
    r = run_cli("submit", str(_job(tmp_path, "nopart")), "--host", slurm_login.host)
    assert r.returncode != 0
    said = r.stderr + r.stdout
    assert "'nosuch'" in said and "debug" in said and "nothing was queued" in said, said
    assert "Traceback" not in said
    assert not slurm_login.cluster.run("squeue", "-h").stdout.strip()
    assert not list((slurm_login.shared / "jobs").glob("nopart-*")) if (slurm_login.shared / "jobs").exists() else True

DDP = """
    import os, time
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    steps = int(os.environ.get("STEPS", "30"))
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ck, start = os.environ["GPUJOB_CKPT_DIR"], 0
    if os.environ.get("GPUJOB_RESUME"):
        st = torch.load(os.environ["GPUJOB_RESUME"])
        model.module.load_state_dict(st["model"])
        start = st["step"]
    print(f"rank {rank} of {world} on node {os.environ.get('SLURM_NODEID')} starts at step {start}", flush=True)
    x = torch.randn(32, 4)
    y = x.sum(1, keepdim=True)
    for step in range(start + 1, steps + 1):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step}/{steps} loss={loss.item():.4f}", flush=True)
            if step % 5 == 0:
                path = os.path.join(ck, f"step{step:04d}.pt")
                torch.save({"model": model.module.state_dict(), "step": step}, path + ".tmp")
                os.replace(path + ".tmp", path)
        time.sleep(0.2)
    dist.destroy_process_group()
"""

def test_a_two_node_job_trains_with_torchrun_across_both_nodes_and_resumes_after_a_requeue(
        slurm_login2: SlurmLogin, tmp_path: Path) -> None:
    needs("torch")
    c = slurm_login2.cluster
    job = write_job(tmp_path, "ddp", DDP, "python main.py", env={"STEPS": "30"}, nodes=2, launcher="torchrun",
                    checkpoint={"pattern": "step*.pt"})
    res = submit(slurm_login2.host, job)
    job_id, sid = res["job_id"], res["slurm_job"]
    wait_for(lambda: "step 8/" in _log(slurm_login2, job_id), 120, lambda: _log(slurm_login2, job_id)[-3000:])
    log = _log(slurm_login2, job_id)
    assert {"node 0", "node 1"} <= {ln.split(" on ")[1].split(" starts")[0] for ln in log.splitlines()
                                    if ln.startswith("rank ")}, log[-3000:]
    c.requeue(sid)
    st = wait_for(lambda: status(slurm_login2.host, job_id)["state"] in ("succeeded", "failed", "stopped", "lost"),
                  180, lambda: _log(slurm_login2, job_id)[-3000:], interval=1.0)
    st = status(slurm_login2.host, job_id)
    log = _log(slurm_login2, job_id)
    assert st["state"] == "succeeded", log[-3000:]
    starts = [int(ln.rsplit(" ", 1)[1]) for ln in log.splitlines() if ln.startswith("rank 0 of 2")]
    assert len(starts) == 2 and starts[0] == 0 and starts[1] >= 5, log[-3000:]
    assert st["requeues"] == 1 and "step 30/30" in log
    assert not _alive_in_slurm(c) and not job_processes(job_id)

def test_at_the_time_limit_the_job_checkpoints_requeues_itself_and_resumes(slurm_login: SlurmLogin,
                                                                              tmp_path: Path) -> None:
    """``slurm: {time: 1m}`` with ``stop: {grace: 30s}``: Slurm's USR1 30 s before the limit makes the
    supervisor stop after the next checkpoint and requeue the job; it resumes from that checkpoint."""
    needs("torch")
    c = slurm_login.cluster
    res = submit(slurm_login.host, _job(tmp_path, "limited", steps=100_000, slurm={"time": "1m"},
                                        stop={"grace": "30s"}))
    job_id, sid = res["job_id"], res["slurm_job"]
    seen: set = set()

    def requeued() -> bool:
        seen.add(status(slurm_login.host, job_id)["state"])
        return "Slurm's time limit is near" in _log(slurm_login, job_id) and \
            c.job_field(sid, "JobState") == "PENDING"

    wait_for(requeued, 150, lambda: f"{seen}\n{_log(slurm_login, job_id)[-3000:]}", interval=1.0)
    c.release(sid, time.time())  # Slurm holds a requeued job two minutes: the test does not wait them
    wait_for(lambda: _log(slurm_login, job_id).count("start at step") == 2, 60,
             lambda: _log(slurm_login, job_id)[-3000:])
    log = _log(slurm_login, job_id)
    steps = [int(ln.split()[1].split("/")[0]) for ln in log.splitlines() if ln.startswith("step ")]
    resumed = int([ln for ln in log.splitlines() if ln.startswith("start at step")][1].split()[3])
    first_run = steps[:steps.index(1, 1)] if steps.count(1) > 1 else steps
    before = max(s for s in steps[:len(steps) - (len(steps) - len(first_run))] if s) if first_run else 0
    assert resumed > 0 and resumed % 5 == 0 and before - resumed < 5, log[-3000:]  # at most the steps since it
    assert not seen & {"lost", "failed", "stopped"}, seen
    r = run_cli("stop", job_id, "--host", slurm_login.host, "--json", timeout=180)
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "stopped", r.stderr + r.stdout
    assert not _alive_in_slurm(c) and not job_processes(job_id)

def test_with_slurms_controller_down_submit_is_refused_and_status_keeps_the_records_word(
        slurm_login: SlurmLogin, tmp_path: Path) -> None:
    needs("torch")
    c = slurm_login.cluster
    res = submit(slurm_login.host, _job(tmp_path, "before", steps=100_000))
    wait_for(lambda: "step 3/" in _log(slurm_login, res["job_id"]), 90, lambda: _log(slurm_login, res["job_id"]))
    os.kill(c.daemon_pids()["slurmctld"], signal.SIGKILL)
    r = run_cli("submit", str(_job(tmp_path, "during")), "--host", slurm_login.host, timeout=180)
    said = r.stderr + r.stdout
    assert r.returncode != 0 and "controller does not answer" in said and "Traceback" not in said, said
    assert not list((slurm_login.shared / "jobs").glob("during-*"))
    st = status(slurm_login.host, res["job_id"])  # the record's word, and why Slurm's is missing
    assert st["state"] == "running" and "controller does not answer" in st["slurm"]["error"], st
    shown = run_cli("status", res["job_id"], "--host", slurm_login.host, timeout=120)
    assert shown.returncode == 0 and "controller does not answer" in shown.stdout, shown.stdout + shown.stderr

def test_a_sweep_on_a_slurm_host_runs_each_trial_as_a_slurm_job(slurm_login: SlurmLogin, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    needs("optuna")
    from tests.gpujob.usecases.experiments.test_experiments import LOOP

    monkeypatch.setenv("GPUJOB_SWEEP_POLL", "0.5")
    job = write_job(tmp_path, "swslurm", LOOP, "python main.py --lr 0.1 --steps 6 --sleep 0.1",
                    sweep={"method": "grid", "params": {"lr": [0.1, 0.3]}, "metric": "loss", "direction": "minimize"})
    r = run_cli("sweep", str(job), "--hosts", slurm_login.host, "--name", "sw-slurm", "--json", timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert [t["state"] for t in doc["trials"]] == ["complete", "complete"], doc["trials"]
    names = slurm_login.cluster.run("squeue", "-h", "--states=all", "-o", "%j").stdout.split()
    assert sorted(names) == sorted(f"gpujob:{t['job_id']}" for t in doc["trials"])  # one Slurm job per trial


@pytest.mark.parametrize("slurm_cluster", [{"partitions": ["PartitionName=small Nodes=n1 MaxTime=5 MaxNodes=1"]}],
                         indirect=True)
def test_what_the_partition_cannot_give_is_refused_naming_the_limit(slurm_login: SlurmLogin, tmp_path: Path) -> None:
    for name, extra, said in (("long", {"slurm": {"partition": "small", "time": "2h"}}, "allows at most"),
                              ("wide", {"slurm": {"partition": "small"}, "nodes": 2, "launcher": "torchrun"},
                               "gives at most 1"),
                              ("gpu", {"gpus": 1}, "has no GPUs"),
                              ("allgpus", {"gpus": "all"}, "has no GPUs"),
                              # an option never becomes a command of the batch script
                              ("inject", {"slurm": {"sbatch": ["--exclusive\ntouch /tmp/gj-injected"]}}, "line break")):
        r = run_cli("submit", str(_job(tmp_path, name, **extra)), "--host", slurm_login.host)
        out = r.stderr + r.stdout
        assert r.returncode != 0 and said in out and "nothing was queued" in out and "Traceback" not in out, out
    assert not slurm_login.cluster.run("squeue", "-h").stdout.strip()
    assert not list(slurm_login.shared.glob("jobs/*-*")) and not Path("/tmp/gj-injected").exists()


def test_a_job_cancelled_in_slurm_outside_gpujob_reads_stopped_saying_so(slurm_login: SlurmLogin,
                                                                        tmp_path: Path) -> None:
    needs("torch")
    res = submit(slurm_login.host, _job(tmp_path, "cancelled", steps=100_000))
    wait_for(lambda: "step 3/" in _log(slurm_login, res["job_id"]), 90, lambda: _log(slurm_login, res["job_id"]))
    slurm_login.cluster.run("scancel", res["slurm_job"])
    wait_for(lambda: status(slurm_login.host, res["job_id"])["state"] not in ("running", "requeued"), 60,
             "the cancel to be seen")
    st = status(slurm_login.host, res["job_id"])
    assert st["state"] == "stopped" and "scancel" in st["reason"], st
    assert json.loads((slurm_login.shared / "jobs" / res["job_id"] / "status.json").read_text())["state"] == "stopped"
    assert not job_processes(res["job_id"])
