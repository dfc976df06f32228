"""The verbs about this instance: ``hello`` (the agent's version), ``gpus``, ``doctor``, ``bench``
(the preflight), ``authkeys`` (host rekey), and the idle watcher (``idle_shutdown``, ``idle_watch``)."""

import argparse
import json
import os
import sys
from typing import Mapping

from remote import AGENT_PROTOCOL
from remote.core import layout, procs
from remote.core.layout import Root


def hello(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    return {"protocol": AGENT_PROTOCOL, "python": sys.version.split()[0], "executable": sys.executable,
            "root": str(root.root), "boot_id": procs.boot_id(), "agent": layout.AGENT_DIR.name}


def gpus(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    """A fresh nvidia-smi sample (None on a CPU host; ``smi_error`` says why when an nvidia-smi is
    there and fails), who holds which GPU, and the queue."""
    from remote.host import gpus as host_gpus

    prefix = a.path_prefix or os.environ.get("GPUJOB_PATH_PREFIX", "")  # the host profile's, as a job gets it
    found, error = host_gpus.probe(prefix)
    return {"gpus": found, "smi_error": error or None, "held": host_gpus.taken(root, ""), "queue": host_gpus.queue(root)}


def idle_shutdown(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    """Install (minutes > 0) or remove (0) the idle watcher; stdin: {"command": shutdown command}."""
    from remote.run import power

    req = json.loads(sys.stdin.read() or "{}")
    return power.install_idle_watch(root, a.minutes, req.get("command"))


def authkeys(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    """Add or remove a public key where this host's sshd reads them (``host rekey``); stdin: the request."""
    from remote.host import authkeys as host_authkeys

    return host_authkeys.change(json.loads(sys.stdin.read() or "{}"))


def idle_watch(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    from remote.run import power

    req = json.loads(sys.stdin.read() or "{}")
    return {"exit": power.idle_watch(root, a.minutes, req.get("command"), a.poll)}


def doctor(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    from remote.host import doctor as host_doctor

    job = None
    if a.job_run is not None or a.job_python is not None:
        job = {"run": a.job_run or "", "python": a.job_python or "", "setup": a.job_setup}
    slurm = {"partition": a.partition, "account": a.account, "qos": a.qos} if a.slurm else None
    return host_doctor.report(root, a.data_disk, a.turbo_file, a.path_prefix, a.torch_timeout, job, slurm, a.slurm_wait)


def bench(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    from remote.host import bench as host_bench

    return host_bench.run(root, a.data_disk, a.path_prefix, a.budget)
