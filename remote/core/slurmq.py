"""What a Slurm cluster says of a job (standard library only, Python 3.8+): its client commands, run on
the login node (issue 45).

On a Slurm host Slurm decides whether a job waits, runs, was requeued or is gone; the liveness rule
(remote/core/liveness.py) asks here instead of this machine's process table, which a login node
never shares with the compute nodes. The order is ``squeue`` (``--states=all`` also lists the jobs
that ended while slurmctld remembers them, ``MinJobAge``), then ``scontrol show job``, then ``sacct``
only where accounting is on; never ``squeue --only-job-state`` (Slurm 22.05 rejects it). A look is
kept for a second and covers every job of this user: ``ls`` asks for each job, one ``squeue`` answers.
"""

import os
import shutil
import subprocess
import time
from typing import Dict, Iterable, List, Optional, Sequence

from remote.core.errors import AgentError

TIMEOUT = 20.0  # s for one client command (a busy slurmctld answers in well under a second)
KEEP = 1.0  # s a look is reused
# Slurm's own state words (never one of gpujob's job states: remote/core/protocol.py)
ON_A_NODE = "RUNNING"  # its processes run on its nodes now
UNKNOWN = "UNKNOWN"  # Slurm no longer knows the job
# Slurm's states in which the job is still Slurm's to run: waiting, starting, running, ending, requeued
WAITING = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT")
RUNNING = ("RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED")
# how an ended Slurm job reads when its supervisor could not write the end (it was killed with it)
ENDED_AS = {
    "CANCELLED": ("stopped", "cancelled in Slurm (scancel), not through gpujob"),
    "TIMEOUT": ("failed", "Slurm's time limit ended it"),
    "DEADLINE": ("failed", "Slurm's deadline ended it"),
    "OUT_OF_MEMORY": ("failed", "Slurm ended it: out of memory (the job's --mem)"),
    "FAILED": ("failed", "Slurm ended it: its batch script failed"),
    "PREEMPTED": ("stopped", "preempted by Slurm and not requeued"),
}
MISSING = "the Slurm command {} is not on the login node's PATH"


class SlurmError(AgentError):
    """A Slurm command failed: said with Slurm's own words and what to do."""

    def __init__(self, message: str, remedy: str = "", code: str = "slurm") -> None:
        super().__init__(message, remedy or "check the cluster with: gpujob doctor HOST", code)


class SlurmJob:
    """One job as Slurm says it: ``state`` in Slurm's words (RUNNING, PENDING ...), the ``reason`` it
    waits, its expected ``start`` (epoch seconds; None when Slurm gives none) and its ``nodes``."""

    __slots__ = ("id", "state", "reason", "start", "nodes", "source")

    def __init__(self, job_id: str, state: str, reason: str = "", start: Optional[float] = None,
                 nodes: str = "", source: str = "squeue") -> None:
        self.id, self.state, self.reason, self.start, self.nodes, self.source = \
            job_id, state.split()[0].rstrip("+") if state else UNKNOWN, reason, start, nodes, source

    @property
    def waiting(self) -> bool:
        return self.state in WAITING

    @property
    def running(self) -> bool:
        return self.state in RUNNING

    @property
    def alive(self) -> bool:
        """Slurm will still run it, or runs it now."""
        return self.waiting or self.running

    def to_json(self) -> Dict[str, object]:
        out = {"job": self.id, "state": self.state}  # type: Dict[str, object]
        if self.reason and self.reason not in ("None", "(null)"):
            out["reason"] = self.reason
        if self.start:
            out["expected_start"] = self.start
        if self.nodes:
            out["nodes"] = self.nodes
        return out


def command(*args: str, timeout: float = TIMEOUT, check: bool = True) -> "subprocess.CompletedProcess[str]":
    """Run a Slurm client command; a missing command or a silent controller is a :class:`SlurmError`."""
    if shutil.which(args[0]) is None:
        raise SlurmError(MISSING.format(args[0]),
                         "install Slurm's client on the login node (Debian: apt install slurm-client), or fix "
                         "the PATH its login shell gets", "slurm_missing")
    try:
        p = subprocess.run(list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SlurmError("{} did not answer within {:g} s: Slurm's controller is busy or away".format(
            args[0], timeout), "try again; the cluster's status: sinfo, scontrol ping", "slurm_down") from None
    if check and p.returncode != 0:
        raise error_of(args[0], p.stderr or p.stdout)
    return p


def error_of(cmd: str, said: str) -> SlurmError:
    """A failed client command's words as a :class:`SlurmError` naming the cause."""
    said = " ".join(said.strip().split())[:400] or "no message"
    if "Unable to contact slurm controller" in said or "Connection refused" in said or "Socket timed out" in said:
        return SlurmError("Slurm's controller does not answer ({}: {})".format(cmd, said),
                          "nothing was changed; try again once scontrol ping says UP (ask the cluster's admins "
                          "if it stays down)", "slurm_down")
    return SlurmError("{} refused: {}".format(cmd, said))


def _time(text: str) -> Optional[float]:
    """Slurm's ``2026-12-07T12:28:45`` (local time) as epoch seconds; None for N/A, Unknown or (null)."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


_LOOKS = {}  # type: Dict[str, tuple]  # job id -> (monotonic time, SlurmJob or None)


def jobs(ids: Iterable[str], fresh: bool = False) -> Dict[str, Optional[SlurmJob]]:
    """What Slurm says of each of ``ids`` (None: Slurm no longer knows it); one ``squeue`` for all,
    ``scontrol`` and ``sacct`` only for the ones it does not list. A :class:`SlurmError` when the
    controller does not answer: a reader then keeps the record's word rather than guessing."""
    want = sorted({str(i) for i in ids if i})
    t = time.monotonic()
    out = {}  # type: Dict[str, Optional[SlurmJob]]
    ask = []
    for i in want:
        seen = _LOOKS.get(i)
        if seen is not None and not fresh and t - seen[0] < KEEP:
            out[i] = seen[1]
        else:
            ask.append(i)
    if ask:
        # a fresh look asks for these ids; any other, for every job of this user at once: ``ls`` judges
        # each of its jobs in turn, and the first look answers for the rest
        found = _squeue(["-j", ",".join(ask)] if fresh else ["--me"])
        for i, j in found.items():
            _LOOKS[i] = (t, j)
        for i in ask:
            job = found.get(i) or _scontrol(i) or _sacct(i)
            out[i] = job
            _LOOKS[i] = (t, job)
    return out


def job(job_id: str, fresh: bool = False) -> Optional[SlurmJob]:
    return jobs([job_id], fresh)[job_id]


def forget(job_id: str) -> None:
    """The next look asks Slurm again (after sbatch, scancel or a requeue changed it)."""
    _LOOKS.pop(str(job_id), None)


def _squeue(which: Sequence[str]) -> Dict[str, SlurmJob]:
    """squeue's rows for ``which`` (``-j IDS`` or ``--me``), ended jobs slurmctld remembers included."""
    p = command("squeue", "-h", "--states=all", *which, "-o", "%i|%T|%r|%S|%N", check=False)
    if p.returncode != 0:
        if "Invalid job id" in p.stderr:  # every id unknown (a single one, or Slurm forgot them all)
            return {}
        raise error_of("squeue", p.stderr or p.stdout)
    out = {}
    for line in p.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 5:
            out[parts[0].strip()] = SlurmJob(parts[0].strip(), parts[1], parts[2], _time(parts[3]), parts[4])
    return out


def _scontrol(job_id: str) -> Optional[SlurmJob]:
    p = command("scontrol", "show", "job", "-o", job_id, check=False)
    if p.returncode != 0:
        if "Invalid job id" in p.stderr:
            return None
        raise error_of("scontrol", p.stderr or p.stdout)
    f = fields(p.stdout)
    if not f.get("JobState"):
        return None
    return SlurmJob(job_id, f["JobState"], f.get("Reason", ""), _time(f.get("StartTime", "")),
                    f.get("NodeList", ""), "scontrol")


def _sacct(job_id: str) -> Optional[SlurmJob]:
    """Accounting's word on a job slurmctld forgot; None where accounting is off (many small clusters)."""
    if shutil.which("sacct") is None:
        return None
    p = command("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "JobID,State,NodeList", check=False)
    if p.returncode != 0:
        return None
    for line in p.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[0] == job_id:
            return SlurmJob(job_id, parts[1], "", None, parts[2], "sacct")
    return None


def fields(text: str) -> Dict[str, str]:
    """``scontrol show ... -o``'s ``Key=Value`` words (a value may hold spaces only in the last keys)."""
    out = {}
    for word in text.split():
        k, eq, v = word.partition("=")
        if eq and k not in out:
            out[k] = v
    return out


def partition(name: Optional[str]) -> Optional[Dict[str, str]]:
    """``scontrol show partition NAME``'s fields (the default partition's for None); None if Slurm has
    no such partition."""
    p = command("scontrol", "show", "partition", "-o", *([name] if name else []), check=False)
    if p.returncode != 0:
        if "not found" in (p.stderr + p.stdout).lower() or "invalid partition" in p.stderr.lower():
            return None
        raise error_of("scontrol", p.stderr or p.stdout)
    for line in p.stdout.splitlines():
        f = fields(line)
        if name is None and f.get("Default") != "YES":
            continue
        if f.get("PartitionName"):
            return f
    return None


def partitions() -> List[str]:
    p = command("sinfo", "-h", "-o", "%R", check=False)
    return sorted({x.strip() for x in p.stdout.split() if x.strip()}) if p.returncode == 0 else []


def cancel(job_id: str, wait: float = 30.0) -> bool:
    """``scancel`` the job and wait (up to ``wait`` s) until Slurm no longer runs it; True once gone."""
    command("scancel", job_id, check=False)
    forget(job_id)
    deadline = time.monotonic() + wait
    while True:
        now = job(job_id, fresh=True)
        if now is None or not now.alive:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def inside() -> Optional[str]:
    """The Slurm job id this process runs under (an allocation's environment), else None."""
    return os.environ.get("SLURM_JOB_ID") or None
