"""``gpujob doctor`` over a real sshd: every JSON field on a host without a GPU; AutoDL
detection from the session's variables; an ``nvidia-smi`` stand-in on PATH for the GPU lines."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import SSHD, run_cli, stop_sshd, wait_port

FIELDS = {
    "agent": {"version", "protocol", "python", "python_version"},
    "os": {"name", "kernel", "arch", "hostname"},
    "torch": {"python", "version", "cuda", "cuda_available", "devices", "error"},
    "nvidia": {"nvidia_smi", "driver", "cuda", "gpus", "error"},
    "disks": {"system", "data", "root"},
    "network_turbo": {"path", "exists"},
    "platform": {"name", "autodl", "region", "container"},
    "env": {"HF_ENDPOINT", "HF_HOME", "PIP_INDEX_URL", "http_proxy"},
}
TOP = set(FIELDS) | {"login_python", "pythons", "root", "envs", "agent_log_tail", "checks", "host", "preset"}

FAKE_SMI = """#!/bin/sh
case "$*" in
  *query-gpu*) echo "0, NVIDIA A100-SXM4-80GB, 535.104.05, 81920, 1024, 7";;
  *) echo "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |";;
esac
"""


def no_torch_bin(tmp_path: Path, smi: bool = False) -> Path:
    """A PATH prefix whose ``python`` is the system one (no torch), maybe with an nvidia-smi stand-in."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    (d / "python").symlink_to("/usr/bin/python3")
    if smi:
        (d / "nvidia-smi").write_text(FAKE_SMI)
        (d / "nvidia-smi").chmod(0o755)
    return d


def save_host(sshd, tmp_path: Path, prefix: Path, **kw: object) -> None:
    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.keys import public_key_line

    sshd.authorize(public_key_line())
    HostStore().save(Host(name="box", hostname="127.0.0.1", port=sshd.port, user=os.environ.get("USER", "root"),
                          root=str(tmp_path / "remote-root"), env={"GPUJOB_PATH_PREFIX": str(prefix)},
                          connect_timeout=5, **kw))  # type: ignore[arg-type]


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs a system python3")
def test_doctor_json_every_field_without_gpu(sshd, tmp_path: Path) -> None:
    save_host(sshd, tmp_path, no_torch_bin(tmp_path))
    r = run_cli("doctor", "box", "--json", timeout=180)
    assert r.returncode == 1, r.stderr + r.stdout  # a ✗ line (no GPU) is no success
    rep = json.loads(r.stdout)
    assert TOP <= set(rep), TOP - set(rep)
    for key, sub in FIELDS.items():
        assert sub <= set(rep[key]), (key, sub - set(rep[key]))
    assert rep["nvidia"]["gpus"] is None and rep["nvidia"]["driver"] is None
    assert rep["torch"]["version"] is None and "torch" in (rep["torch"]["error"] or "")
    assert rep["login_python"] == str(tmp_path / "bin" / "python")
    assert rep["pythons"][0]["source"] == "login shell" and rep["pythons"][0]["version"]
    assert rep["disks"]["system"]["free_bytes"] > 0 and rep["disks"]["root"]["path"] == str(tmp_path / "remote-root")
    levels = {c["name"]: c for c in rep["checks"]}
    assert levels["gpu"]["level"] == "error" and levels["gpu"]["remedy"]
    assert levels["torch"]["level"] == "warn" and levels["torch"]["remedy"]
    assert all(c["level"] in ("ok", "warn", "error") for c in rep["checks"])

    r = run_cli("doctor", "box", timeout=180)  # the human form: one line per check, remedies under
    assert r.returncode == 1, r.stderr
    assert "no GPU" in r.stdout and "→" in r.stdout


def autodl_env(sshd) -> None:
    """Restart the sshd so every session carries AutoDL's own variables (as an AutoDL container does)."""
    stop_sshd(sshd)
    cfg = sshd.dir / "sshd_config"
    text, ours = cfg.read_text(), "AutoDLRegion=westb AutoDLContainerUUID=abc123"
    # sshd keeps the first SetEnv line only: join ours to the fixture's, if it has one
    cfg.write_text(text.replace("SetEnv ", f"SetEnv {ours} ", 1) if "SetEnv " in text else text + f"SetEnv {ours}\n")
    sshd.proc = subprocess.Popen([SSHD or "sshd", "-D", "-e", "-f", str(cfg)], stderr=open(sshd.dir / "sshd.log", "ab"))
    wait_port(sshd.port)


def test_host_add_detects_autodl_and_proposes_the_preset(sshd, tmp_path: Path) -> None:
    from gpujob.config.keys import public_key_line

    autodl_env(sshd)
    sshd.authorize(public_key_line())
    r = run_cli("host", "add", "a100", "--ssh", sshd.ssh_line(), "--root", str(tmp_path / "r"), "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    prof = json.loads(r.stdout)
    assert prof["preset"] == "autodl" and prof["region"] == "westb" and prof["shutdown_command"] == "/usr/bin/shutdown"
    assert "detected autodl (region westb)" in r.stderr and "TensorBoard port 6006" in r.stderr
    from gpujob.config.hosts import HostStore

    h = HostStore().get("a100")
    assert h.data_disk_path == "/root/autodl-tmp" and h.tb_port == 6006
    assert h.remote_root == str(tmp_path / "r")


def test_doctor_detects_autodl_and_gpu_stand_in(sshd, tmp_path: Path) -> None:
    # AutoDL's own variables in every SSH session (sshd SetEnv), a data disk and network_turbo under tmp
    autodl_env(sshd)
    data = tmp_path / "fs" / "root" / "autodl-tmp"
    data.mkdir(parents=True)
    turbo = tmp_path / "fs" / "etc" / "network_turbo"
    turbo.parent.mkdir()
    turbo.write_text("export http_proxy=http://127.0.0.1:9\n")
    from gpujob.config.hosts import HostStore

    save_host(sshd, tmp_path, no_torch_bin(tmp_path, smi=True), preset="generic", data_disk=str(data),
              network_turbo=True)
    store = HostStore()
    h = store.get("box")
    h.env["GPUJOB_NETWORK_TURBO_FILE"] = str(turbo)
    store.save(h)
    r = run_cli("doctor", "box", "--json", timeout=180)
    assert r.returncode == 0, r.stderr + r.stdout
    rep = json.loads(r.stdout)
    assert rep["platform"] == {"name": "autodl", "autodl": True, "region": "westb", "container": "abc123"}
    assert rep["nvidia"]["driver"] == "535.104.05" and rep["nvidia"]["cuda"] == "12.2"
    assert rep["nvidia"]["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    assert rep["network_turbo"] == {"path": str(turbo), "exists": True}
    assert rep["disks"]["data"]["path"] == str(data) and rep["disks"]["data"]["exists"]
    checks = {c["name"]: c for c in rep["checks"]}
    assert checks["gpu"]["level"] == "ok"
    assert checks["platform"]["level"] == "warn" and "--preset autodl" in checks["platform"]["remedy"]
    assert checks["root"]["level"] == "warn"  # root not on the data disk
    assert checks["network_turbo"]["level"] == "ok"


def test_checks_torch_cannot_use_gpu() -> None:
    """The judging is a plain function over the report: torch without CUDA beside a GPU is red."""
    from gpujob.config.hosts import Host
    from gpujob.usecases.hosts.doctor import checks

    rep = {"login_python": "/root/miniconda3/bin/python", "pythons": [],
           "torch": {"python": "/root/miniconda3/bin/python", "version": "2.1.0+cpu", "cuda": None,
                     "cuda_available": False, "devices": []},
           "nvidia": {"driver": "535.104.05", "cuda": "12.2", "gpus": [{"index": 0, "name": "RTX 4090",
                                                                       "memory_total_mib": 24564}]},
           "disks": {"system": {"path": "/", "free_bytes": 1024**3, "total_bytes": 30 * 1024**3},
                     "data": {"path": "/root/autodl-tmp", "free_bytes": 40 * 1024**3, "total_bytes": 50 * 1024**3},
                     "root": {"path": "/root/autodl-tmp/gpujob", "free_bytes": 40 * 1024**3}},
           "network_turbo": {"path": "/etc/network_turbo", "exists": False},
           "platform": {"name": "autodl", "autodl": True, "region": "westb"},
           "root": "/root/autodl-tmp/gpujob", "agent_log_tail": ["x supervisor j crashed: boom"]}
    by = {c.name: c for c in checks(rep, Host(name="a", preset="autodl", network_turbo=True))}
    assert by["torch"].level == "error" and "cu121" in by["torch"].remedy
    assert by["disk:system"].level == "warn"
    assert by["network_turbo"].level == "error"
    assert by["platform"].level == "ok" and "westb" in by["platform"].message
    assert by["agent log"].level == "warn"
    assert "python cmd" not in by  # an agent that does not report it: nothing claimed
    rep["python_command"] = None  # the login shell has python3 only: `run: python ...` would exit 127
    by = {c.name: c for c in checks(rep, Host(name="a", preset="autodl", network_turbo=True))}
    assert by["python cmd"].level == "error" and "exits 127" in by["python cmd"].message


def test_doctor_on_local_reports_the_interpreter_jobs_run(tmp_path: Path) -> None:
    """After a job ran with a venv's python, doctor reports that python and its torch."""
    import subprocess
    import sys

    from tests.helpers import submit, wait_state, write_job

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    job = write_job(tmp_path, "vj", "import sys; print(sys.executable)\n", "python main.py",
                    python=str(venv / "bin" / "python"))
    job_id = submit("local", job)["job_id"]
    wait_state("local", job_id, ("succeeded",))
    r = run_cli("doctor", "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["login_python"] == str(venv / "bin" / "python")
    assert rep["job_python"]["job_id"] == job_id
    assert rep["torch"]["python"] == str(venv / "bin" / "python") and rep["torch"]["version"]
    human = "".join(run_cli("doctor", timeout=300).stdout.split())  # rich wraps long paths at 80 columns
    assert "torchnotimportable" not in human
    assert job_id not in human  # the python line is the image's own `python`: no other job cited as evidence


def test_doctor_job_resolves_its_interpreter_as_submit_does(tmp_path: Path) -> None:
    from tests.helpers import write_job

    good = write_job(tmp_path, "dj", "print(1)", "python main.py")
    bad = write_job(tmp_path, "dj-bad", "print(1)", "python3.99 main.py")
    quick = ("--torch-timeout", "1")  # torch's import is not what this test is about
    r = run_cli("doctor", "local", "--job", str(good), "--json", *quick, timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    line = {c["name"]: c for c in rep["checks"]}["job python"]
    assert line["level"] == "ok" and line["message"].endswith(rep["job_interpreter"]["path"]), line
    assert rep["job_interpreter"]["path"] and os.access(rep["job_interpreter"]["path"], os.X_OK)

    r = run_cli("doctor", "local", "--job", str(bad), *quick, timeout=300)
    said = " ".join(r.stdout.split())
    assert r.returncode == 1 and "✗ job python run: starts `python3.99`: `python3.99` is not on this host's job PATH" \
        in said, r.stdout + r.stderr
    r = run_cli("submit", str(bad), "--host", "local")  # the same resolution refuses the submit
    assert r.returncode != 0 and "`python3.99` is not on this host's job PATH" in " ".join(r.stderr.split()), r.stderr
