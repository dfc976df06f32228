"""The preflight (``gpujob doctor HOST --bench``, remote/host/bench.py) over a real sshd: on this CPU
machine the GPU steps are skipped and said so; an ``nvidia-smi`` stand-in on the host's PATH
reports ECC errors, which warn at submit and send a host list's job to the healthy host."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import write_job

QUICK = {"GPUJOB_BENCH_DISK_MIB": "8"}
SICK_SMI = """#!/bin/sh
case "$*" in
  *query-gpu=index,name*) echo "0, NVIDIA H100 80GB HBM3, 550.54.15, 81559, 0, 0";;
  *query-gpu*) echo "0, 0, 0, 81559, 70.0, 30";;
  -q*) cat <<'Q'
==============NVSMI LOG==============
Attached GPUs                             : 1
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 3
            DRAM Uncorrectable            : 2
        Aggregate
            DRAM Uncorrectable            : 9
    Retired Pages
        Single Bit ECC                    : N/A
        Double Bit ECC                    : N/A
        Pending Page Blacklist            : N/A
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 1
        Pending                           : Yes
        Remapping Failure Occurred        : No
Q
  ;;
  *) echo "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |";;
esac
"""


def test_bench_on_a_cpu_host_skips_the_gpu_steps_and_is_kept(ssh_host: str) -> None:
    r = run_cli("doctor", ssh_host, "--bench", "--json", env_extra=QUICK, timeout=120)
    assert r.returncode == 0, r.stderr + r.stdout
    rep = json.loads(r.stdout)
    assert rep["gpus"] == [] and any("GPU steps" in s and "CPU host" in s for s in rep["skipped"]), rep
    assert rep["disk"]["write_mbs"] > 0 and rep["disk"]["read_mbs"] > 0 and rep["disk"]["free_inodes"] > 0
    assert rep["warnings"] == [] and rep["seconds"] < 60
    kept = next(h for h in json.loads(run_cli("host", "ls", "--json").stdout) if h["name"] == ssh_host)["bench"]
    assert kept["disk"]["write_mbs"] == rep["disk"]["write_mbs"]
    r = run_cli("doctor", ssh_host, "--bench", env_extra=QUICK, timeout=120)
    assert "skipped: GPU steps" in r.stdout and "no warnings" in r.stdout, r.stdout


@pytest.mark.slow
def test_faulty_gpu_warns_at_submit_and_placement_prefers_the_healthy_host(ssh_host: str, tmp_path: Path) -> None:
    from gpujob.config.hosts import HostStore

    store = HostStore()
    sick = store.get(ssh_host)
    bindir = tmp_path / "sick-bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text(SICK_SMI)
    (bindir / "nvidia-smi").chmod(0o755)
    sick.name, sick.root = "sick", str(tmp_path / "sick-root")
    sick.env = {"GPUJOB_PATH_PREFIX": f"{bindir}:{Path(sys.executable).parent}"}
    store.save(sick)
    job = write_job(tmp_path, "noop", "print('hi')\n", "python main.py")
    env = {**QUICK, "GPUJOB_PREFLIGHT": "1"}
    r = run_cli("submit", str(job), "--host", "sick", env_extra=env, timeout=180)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "preflight of sick" in r.stderr, r.stderr
    assert "GPU 0: 2 uncorrected ECC error(s), 0 retired page(s), 1 remapped row(s)" in r.stderr, r.stderr
    kept = store.get("sick").bench or {}
    assert kept["gpus"][0]["rated"]["card"] == "h100" and kept["gpus"][0]["health"]["ecc_corrected"] == 3
    assert any("GPU steps" in s for s in kept["skipped"])  # this machine's torch sees no CUDA device
    r = run_cli("submit", str(job), "--host", "sick", "--json", env_extra=env, timeout=180)  # once per host, warned each time
    assert json.loads(r.stdout)["host_warnings"] and "preflight of" not in r.stderr
    assert "1 warning(s)" in run_cli("host", "ls").stdout
    r = run_cli("submit", str(job), "--host", f"sick,{ssh_host}", "--json", env_extra=env, timeout=180)
    assert r.returncode == 0 and json.loads(r.stdout)["host"] == ssh_host, r.stderr


def test_judge_slow_card_and_versions() -> None:
    from remote.host import bench, rated

    doc = {"gpus": [{"index": 0, "bf16_tflops": 405.0, "fp16_tflops": 800.0, "rated": rated.rated("NVIDIA H100 80GB HBM3")}],
           "versions": {"torch": "2.6.0", "torch_cuda": "12.6", "driver": "535.1", "driver_cuda": "12.2"},
           "disk": {"path": "/d", "free_inodes": 10}}
    w = bench.judge(doc)
    assert w[0] == "GPU 0 measured 41 % of an H100's bf16 rate (405.0 of 989.0 TFLOP/s)", w
    assert "built for CUDA 12.6 but driver 535.1 supports CUDA 12.2" in w[1] and "10 free inodes" in w[2]
    assert rated.rated("NVIDIA GeForce RTX 4090")["bf16_tflops"] == 165.2 and rated.rated("Tesla V100-SXM2-32GB")["bf16_tflops"] is None
    assert os.path.exists(bench.__file__)


V100_Q = """GPU 00000000:3B:00.0
    Product Name                          : Tesla V100-SXM2-32GB
    ECC Errors
        Volatile
            Single Bit
                Device Memory             : 4
                Register File             : 0
                Total                     : 4
            Double Bit
                Device Memory             : 1
                Total                     : 1
        Aggregate
            Single Bit
                Total                     : 40
    Retired Pages
        Single Bit ECC                    : 2
        Double Bit ECC                    : 1
        Pending Page Blacklist            : No
"""


def test_ecc_of_the_older_nvidia_smi_layout() -> None:
    from remote.host import bench

    (g,) = bench.smi_health(V100_Q)
    assert (g["ecc_corrected"], g["ecc_uncorrected"], g["retired_pages"], g["pending"]) == (4, 1, 3, False), g
