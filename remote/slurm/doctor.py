"""``gpujob doctor`` on a Slurm host: what a user gets wrong about the cluster, asked from the login node
(remote/host/doctor.py puts it in its report as ``slurm``; the laptop judges it into check lines).

Each part is present; one that could not be asked is None (a missing client, a silent controller: the
part before says why). The shared root needs a compute node: a token written under gpujob's root here
is read back by a one-task ``srun`` there, with the agent's Python tried beside it (the batch script
runs it on the node). A partition too busy to start that within ``wait`` seconds leaves it unchecked.
"""

import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
from typing import Dict, List, Optional, Tuple

from remote.core import slurmq
from remote.core.layout import Root

CLIENTS = ("sbatch", "squeue", "scontrol", "srun", "sinfo", "scancel")  # what gpujob runs on the login node
NAME = "gpujob:doctor"  # squeue's NAME of the test job
# on the compute node: its name, the token read back (or cat's words), whether the agent's Python starts
PROBE = ('echo "node=${SLURMD_NODENAME:-$(hostname)}"; '
         'if t=$(cat -- "$1" 2>&1); then echo "token=$t"; else echo "unread=$t" | head -c 300; echo; fi; '
         'if "$2" -S -c "" >/dev/null 2>&1; then echo python=ok; else echo python=missing; fi')


def report(root: Root, partition: Optional[str], account: Optional[str], qos: Optional[str],
           wait: float = 60.0) -> Dict[str, object]:
    """{clients, controller, partition, account, qos, shared}: see the module's comment."""
    clients = {c: shutil.which(c) for c in CLIENTS + ("sacctmgr",)}
    doc = {"clients": clients, "controller": None, "partition": None, "account": None, "qos": None,
           "shared": None}  # type: Dict[str, object]
    if not clients["scontrol"]:
        return doc
    ctl = controller()
    doc["controller"] = ctl
    if not ctl["up"]:
        return doc
    part = partition_of(partition)
    doc["partition"] = part
    if account:
        doc["account"] = association("account", account)
    if qos:
        doc["qos"] = association("qos", qos)
    if part.get("found") and clients["srun"]:
        doc["shared"] = shared_root(root, str(part["name"]), account, qos, wait)
    return doc


def controller() -> Dict[str, object]:
    """{up, said}: ``scontrol ping``'s answer."""
    try:
        p = slurmq.command("scontrol", "ping", check=False)
    except slurmq.SlurmError as e:
        return {"up": False, "said": e.message}
    said = " ".join((p.stdout or p.stderr).split())[:300]
    return {"up": p.returncode == 0 and " UP" in p.stdout and "DOWN" not in p.stdout, "said": said}


def gpus_of(gres: str) -> int:
    """The GPUs in a node's gres (``gpu:4``, ``gpu:a100:8(S:0-1)``, ``(null)``: 0)."""
    n = 0
    for g in gres.split(","):
        m = re.match(r"gpu(?::[^:(]+)?:(\d+)", g.strip())
        if m:
            n += int(m.group(1))
    return n


def partition_of(name: Optional[str]) -> Dict[str, object]:
    """The partition jobs go to (the profile's, else the cluster's default): found, its state, time
    limits and nodes with their gres; every partition's name beside it."""
    try:
        part = slurmq.partition(name or None)
        known = slurmq.partitions()
    except slurmq.SlurmError as e:
        return {"asked": name, "found": False, "error": e.message, "partitions": []}
    if part is None:
        return {"asked": name, "found": False, "partitions": known}
    pname = part.get("PartitionName", name or "")
    p = slurmq.command("sinfo", "-h", "-N", "-p", pname, "-o", "%N|%G|%T", check=False)
    nodes = []  # type: List[Dict[str, object]]
    for line in p.stdout.splitlines():
        cols = line.split("|")
        if len(cols) == 3:
            nodes.append({"node": cols[0].strip(), "gres": cols[1].strip(), "gpus": gpus_of(cols[1]),
                          "state": cols[2].strip()})
    return {"asked": name, "found": True, "name": pname, "partitions": known, "state": part.get("State", ""),
            "max_time": part.get("MaxTime", ""), "default_time": part.get("DefaultTime", ""),
            "max_nodes": part.get("MaxNodes", ""), "total_nodes": int(part.get("TotalNodes") or 0) if
            (part.get("TotalNodes") or "").isdigit() else None, "nodes": nodes}


def _user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return os.environ.get("USER", "")


def association(kind: str, name: str) -> Dict[str, object]:
    """{name, checked, found, known} of the profile's account or QOS among this user's associations
    in Slurm's accounting; ``checked`` False (and ``why``) where sacctmgr is absent or accounting is off."""
    if shutil.which("sacctmgr") is None:
        return {"name": name, "checked": False, "why": "sacctmgr is not on the login node"}
    column = "Account" if kind == "account" else "QOS"
    try:
        p = slurmq.command("sacctmgr", "-n", "-P", "show", "assoc", "user=" + _user(), "format=" + column, check=False)
    except slurmq.SlurmError as e:
        return {"name": name, "checked": False, "why": e.message}
    if p.returncode != 0:
        said = " ".join((p.stderr or p.stdout).split())[:300]
        return {"name": name, "checked": False, "why": "sacctmgr answered: {}".format(said or "exit {}".format(p.returncode))}
    known = sorted({x.strip() for line in p.stdout.splitlines() for x in line.split(",") if x.strip()})
    return {"name": name, "checked": True, "found": name in known, "known": known}


def shared_root(root: Root, partition: str, account: Optional[str], qos: Optional[str],
                wait: float) -> Dict[str, object]:
    """{outcome, ...}: ``ok`` (the node read the token: ``node``, ``python``), ``unseen`` (it could
    not: ``said``), ``busy`` (no node within ``wait`` s), ``refused`` (srun's ``said``)."""
    token = os.urandom(12).hex()
    folder = root.root / "cache"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "doctor-{}".format(token)
    path.write_text(token + "\n")
    argv = ["srun", "--partition=" + partition, "--nodes=1", "--ntasks=1", "--time=1", "--job-name=" + NAME,
            "--chdir=/tmp", "--immediate={}".format(max(1, int(wait)))]
    argv += ["--account=" + account] if account else []
    argv += ["--qos=" + qos] if qos else []
    argv += ["sh", "-c", PROBE, "sh", str(path), sys.executable]
    try:
        outs, errs, rc = _run_bounded(argv, wait + 30)
    finally:
        try:
            path.unlink()
        except OSError:
            pass
    said = " ".join(errs.split())[-400:]
    if rc is None or ("queued and waiting for resources" in errs and "Unable to allocate resources" in errs):
        return {"outcome": "busy", "partition": partition, "wait": wait, "said": said}
    got = {}  # type: Dict[str, str]
    for line in outs.splitlines():
        key, eq, value = line.partition("=")
        if eq and key not in got:
            got[key] = value
    if "node" not in got:
        return {"outcome": "refused", "partition": partition, "said": said or "srun exit {}".format(rc)}
    out = {"partition": partition, "node": got.get("node"), "path": str(path), "root": str(root.root),
           "python": sys.executable, "python_ok": got.get("python") == "ok"}  # type: Dict[str, object]
    if got.get("token") == token:
        return dict(out, outcome="ok")
    return dict(out, outcome="unseen", said=got.get("unread") or got.get("token") or "nothing read")


def _run_bounded(argv: List[str], timeout: float) -> Tuple[str, str, Optional[int]]:
    """(stdout, stderr, exit status) of ``argv``; status None when it ran past ``timeout`` (then it is
    interrupted, which withdraws srun's request, and its job cancelled should one be left queued)."""
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True)
    try:
        outs, errs = p.communicate(timeout=timeout)
        return outs, errs, p.returncode
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGINT)
        try:
            outs, errs = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            outs, errs = p.communicate()
        m = re.search(r"srun: job (\d+) queued", errs)
        if m:
            slurmq.command("scancel", m.group(1), check=False)
        return outs, errs, None
