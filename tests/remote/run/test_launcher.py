"""torchrun jobs: several CPU processes (gloo) on one host, and two nodes in network namespaces."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import LOGIN_ENV, REPO, Sshd, run_cli, stop_sshd
from tests.helpers import job_processes, needs, submit, wait_for, wait_state

DDP = REPO / "tests" / "remote" / "run" / "ddp_job"


def ddp_job(tmp_path: Path, **spec: object) -> Path:
    d = tmp_path / "ddp"
    shutil.copytree(DDP, d)
    base = {"name": "ddp", "launcher": "torchrun", "gpus": 2, "run": "python train.py --steps 20 --save-every 10"}
    base.update(spec)
    (d / "job.yaml").write_text(json.dumps(base))
    return d / "job.yaml"


def test_launch_command_rewrites_leading_python() -> None:
    sys.path.insert(0, str(REPO))
    from remote.run import launch

    spec = {"name": "x", "run": "pip list\npython -u train.py --lr 3e-4", "launcher": "torchrun", "gpus": 2}
    assert launch.command(spec).splitlines() == [
        "pip list", "python -m torch.distributed.run --standalone --nproc-per-node=2 train.py --lr 3e-4"]
    spec = {"name": "x", "run": "python3 -m pkg.train", "launcher": "torchrun", "gpus": 1, "job_id": "j",
            "node": {"num_nodes": 2, "rank": 1, "master_addr": "10.0.0.1"}, "retry": {"max_restarts": 2}}
    cmd = launch.command(spec, attempt=3)
    assert "--nnodes=2" in cmd and "--rdzv-backend=c10d" in cmd and "--rdzv-endpoint=10.0.0.1:29400" in cmd
    assert "--rdzv-id=j " in cmd and "--max-restarts=2" in cmd and cmd.endswith("-m pkg.train")
    assert launch.command({"name": "x", "run": "python train.py", "launcher": "none"}) == "python train.py"


def test_seq_cls_template_unchanged_under_torchrun(tmp_path: Path) -> None:
    """The seq-cls template, as `gpujob init` writes it, runs as 2 gloo processes (DDP) on a CPU host."""
    needs("torch", "transformers")
    from gpujob.usecases.init import init_template

    d = tmp_path / "cls"
    init_template("seq-cls", d)
    job = d / "job.yaml"
    job.write_text(job.read_text().replace("gpus: auto", "gpus: 2\nlauncher: torchrun").replace("--epochs 3", "--epochs 1"))
    job_id = submit("local", job)["job_id"]
    st = wait_state("local", job_id, ("succeeded", "failed"), timeout=180)
    log = run_cli("tail", job_id, "-n", "200").stdout
    assert st["state"] == "succeeded", log
    assert "torch.distributed.run --standalone --nproc-per-node=2" not in log  # the command stays the user's
    config = json.loads(log.split("[gpujob] config ", 1)[1].splitlines()[0])
    assert config["world_size"] == 2 and config["effective_batch"] == 2 * config["per_device_batch"]
    assert [c["name"] for c in st["checkpoints"] if c["complete"]]  # rank 0 saved


def test_nodes_spec_validation(tmp_path: Path) -> None:
    from gpujob.config.spec import load_spec
    from gpujob.errors import SpecError

    job = ddp_job(tmp_path, nodes=["a", "b"], launcher="none")
    with pytest.raises(SpecError, match="several nodes need launcher: torchrun"):
        load_spec(job)


# ---- two instances in network namespaces --------------------------------------------------
@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[list[tuple[str, Sshd]]]:
    """Two "instances": network namespaces on a bridge (a free 10.x.y.0/24, names unique to this
    run; leftovers of a killed earlier run removed), each with its own sshd: (address, sshd)."""
    from tests.netlab import make_lab

    lab = make_lab(2)
    made: list[tuple[str, Sshd]] = []
    try:
        for i, ns in enumerate(lab.namespaces):
            made.append((lab.addr(i), _sshd_in(ns, lab.addr(i), tmp_path / f"node{i + 1}")))
        yield made
    finally:
        for _, s in made:
            stop_sshd(s)
        lab.close()


def _sshd_in(ns: str, addr: str, base: Path) -> Sshd:
    from tests.conftest import SSHD

    assert SSHD
    base.mkdir(parents=True)
    key = base / "hostkey"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    ak = base / "authorized_keys"
    ak.touch()
    cfg = base / "sshd_config"
    cfg.write_text(
        f"Port 22\nListenAddress {addr}\nHostKey {key}\nAuthorizedKeysFile {ak}\nPidFile {base / 'pid'}\n"
        "StrictModes no\nUsePAM no\nPasswordAuthentication no\nPermitRootLogin prohibit-password\n"
        "MaxSessions 50\nMaxStartups 50\n"
        "SetEnv OMP_NUM_THREADS=1 " + " ".join(f"{k}={v}" for k, v in LOGIN_ENV.items()) + "\nLogLevel ERROR\n")
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["ip", "netns", "exec", ns, SSHD, "-D", "-e", "-f", str(cfg)],
                            stderr=open(base / "sshd.log", "ab"))
    deadline = time.time() + 10
    import socket

    while time.time() < deadline:
        try:
            socket.create_connection((addr, 22), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        raise RuntimeError(f"sshd in {ns} did not start: {(base / 'sshd.log').read_text()}")
    return Sshd(22, base, key, ak, proc)


@pytest.mark.slow
def test_two_node_job_trains_stays_identical_and_resumes(two_nodes: list[tuple[str, Sshd]], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # the product's default: a fresh namespace's first handshake can be refused while it settles
    needs("torch")
    monkeypatch.setenv("GPUJOB_CONNECT_RETRIES", "3")
    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.keys import public_key_line

    shared = tmp_path / "shared-fs"  # both "instances" see it, as AutoDL's autodl-fs
    store = HostStore()
    for i, (addr, s) in enumerate(two_nodes, start=1):
        s.authorize(public_key_line())
        store.save(Host(name=f"node{i}", hostname=addr, port=22, user="root",
                        root=str(tmp_path / f"root{i}"), connect_timeout=5,
                        env={"GPUJOB_PATH_PREFIX": str(Path(sys.executable).parent), "GLOO_SOCKET_IFNAME": "gjeth0"}))
    job = ddp_job(tmp_path, gpus=1, nodes=["node1", "node2"], checkpoint={"dir": str(shared), "keep": 10},
                  retry={"max_restarts": 2, "backoff": "1s"}, run="python train.py --steps 60 --save-every 10 --sleep 0.1")
    r = run_cli("submit", str(job), "--json", timeout=180)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    job_id = res["job_id"]
    assert [n["host"] for n in res["nodes"]] == ["node1", "node2"]

    # both nodes train; once a checkpoint exists, kill every process of the job on node 2
    deadline = time.time() + 90
    while time.time() < deadline and not list((shared / job_id).glob("step-20/.gpujob-complete")):
        time.sleep(0.3)
    assert list((shared / job_id).glob("step-20/.gpujob-complete")), _debug(job_id, tmp_path)
    node2 = tmp_path / "root2" / "jobs" / job_id
    sup2 = json.loads((node2 / "status.json").read_text())["child_pid"]
    pids = [p for p in job_processes(job_id) if _is_under(p, tmp_path / "root2")] or [sup2]
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass

    # each node's own record first (a status of two nodes is a second of CPU the nodes need); then the
    # laptop's answer, drawn from both
    def ended(i: int) -> bool:
        try:
            rec = json.loads((tmp_path / f"root{i}" / "jobs" / job_id / "status.json").read_text())
        except (OSError, ValueError):
            return False
        return rec.get("state") in ("succeeded", "failed", "stopped")

    wait_for(lambda: ended(1) and ended(2), 150, lambda: _debug(job_id, tmp_path))
    st = json.loads(run_cli("status", job_id, "--json").stdout)
    log = run_cli("tail", job_id, "-n", "200").stdout
    assert st["state"] == "succeeded", log
    assert {n["state"] for n in st["nodes"]} == {"succeeded"}
    assert "[node 0]" in log and "[node 1]" in log and "resumed from" in log
    d1 = (tmp_path / "root1" / "jobs" / job_id / "params-rank0.txt").read_text()
    d2 = (node2 / "params-rank1.txt").read_text()
    assert d1 == d2  # the parameters are identical on both nodes
    assert any(a.get("resume") for a in json.loads((node2 / "status.json").read_text())["attempts"][1:])


def _is_under(pid: int, root: Path) -> bool:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"GPUJOB_JOB_DIR={root}".encode() in env


def _debug(job_id: str, tmp_path: Path) -> str:
    out = []
    for i in (1, 2):
        jd = tmp_path / f"root{i}" / "jobs" / job_id
        for name in ("output.log", "agent.log", "status.json"):
            p = jd / name
            out.append(f"--- node{i} {name}\n" + (p.read_text()[-3000:] if p.exists() else "(none)"))
    out.append(subprocess.run(["ps", "-eo", "pid,stat,etime,args"], capture_output=True, text=True).stdout[-4000:])
    return "\n".join(out)
