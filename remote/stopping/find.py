"""Every process of a job, by every means the host allows.

``procs.job_pids`` finds the run command's tree and the carriers of ``GPUJOB_JOB_DIR``. A process
can leave both (a double fork, ``setsid``, ``execve`` with an empty environment: data-loader
daemons, ``nohup`` wrappers, servers), so a stop also looks for:

- the sessions and process groups the job's processes lead (``setsid`` children of a job process);
- the supervisor's orphans (it is a child subreaper: remote/stopping/reaper.py) outside its own session;
- the job's cgroup, where the host let us create one (remote/stopping/cgroup.py);
- processes without a terminal whose working folder is under ``<job>/code`` or that hold a file
  under ``<job>/`` open for writing (an interactive shell cd'ed there, ``tail`` and TensorBoard,
  which only read, are not the job's);
- GPU compute processes (``nvidia-smi --query-compute-apps=pid``) started after the job began,
  for a job that was given GPUs, unless another job's environment marks them or they have a
  terminal (someone's interactive session);
and then every descendant of what was found.
"""

import os
import subprocess
from typing import Dict, Iterable, List, Optional, Set

from remote.core import procs
from remote.stopping import cgroup as cg

PROC = "/proc"


def _stat(pid: int) -> List[str]:
    """/proc/PID/stat after the command name: [state, ppid, pgrp, session, tty_nr, ...]."""
    try:
        with open("{}/{}/stat".format(PROC, pid)) as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def frozen(pid: Optional[int]) -> str:
    """How ``pid`` is frozen: 'stopped (SIGSTOP)' or 'traced (a debugger)', else ''."""
    st = _stat(pid) if pid else []
    return {"T": "stopped (SIGSTOP)", "t": "traced (a debugger)"}.get(st[0] if st else "", "")


def _btime() -> float:
    try:
        with open(PROC + "/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0.0


# /proc/stat's boot time is whole seconds (and the wall clock may have been stepped since boot), so a
# process's start read from /proc can come out up to a second before the moment it really started
START_SLACK = 2.0


def started(pid: int) -> float:
    """When ``pid`` started (epoch seconds; 0 if unknown)."""
    st = _stat(pid)
    try:
        return _btime() + float(st[19]) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError, OSError):
        return 0.0


def is_agent(pid: int) -> bool:
    """gpujob's own agent processes (the supervisor, tail, serve, this verb): never the job's."""
    return b"\0-m\0remote\0" in procs._cmdline(pid)


def _under(pid: int, code: str, job: str) -> bool:
    try:
        cwd = os.readlink("{}/{}/cwd".format(PROC, pid))
    except OSError:
        cwd = ""
    if cwd == code or cwd.startswith(code + "/"):
        return True
    from remote.ckpt.checkpoints import open_for_writing

    return bool(open_for_writing([pid], [job]))


def gpu_pids(path_prefix: str = "") -> Optional[Set[int]]:
    """PIDs of GPU compute processes, or None without a working ``nvidia-smi`` (a CPU host)."""
    from remote.host.gpus import smi

    exe = smi(path_prefix)
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-compute-apps=pid", "--format=csv,noheader"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=10, check=True).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        return None
    return {int(x) for x in out.split() if x.strip().isdigit()}


def _descendants(found: Set[int], parents: Dict[int, int]) -> Set[int]:
    children = {}  # type: Dict[int, List[int]]
    for c, p in parents.items():
        children.setdefault(p, []).append(c)
    out, frontier = set(found), list(found)
    while frontier:
        for c in children.get(frontier.pop(), []):
            if c not in out:
                out.add(c)
                frontier.append(c)
    return out


def find(job_id: str, job_dir: str, root_pid: Optional[int] = None, reaper: Optional[int] = None,
         cgroup: Optional[str] = None, since: float = 0.0, path_prefix: str = "",
         exclude: Iterable[int] = ()) -> Set[int]:
    """The job's live processes (see the module's text). ``reaper``: the supervisor's pid, whose
    orphans outside its own session are the job's; ``since``: when the job first started (for GPU
    processes); ``exclude``: pids never to count (the run command a Popen still waits for is not
    excluded: it is the job's)."""
    me = os.getpid()
    skip = set(exclude) | {me, os.getppid()}
    if reaper:
        skip.add(reaper)
    parents = procs._parents()
    found = set(procs.job_pids(job_id, root_pid, job_dir)) | cg.pids(cgroup)
    if reaper and reaper in parents:
        own = (_stat(reaper) or ["", "", "", ""])[3]
        found |= {c for c, p in parents.items() if p == reaper and (_stat(c) or ["", "", "", ""])[3] != own
                  and not is_agent(c)}  # not a helper of gpujob's own it started in a session of its own
    code, job = os.path.join(job_dir, "code"), job_dir.rstrip("/")
    leaders = {str(p) for p in found | ({root_pid} if root_pid else set())}
    gpu = gpu_pids(path_prefix) if since else None
    mine = b"GPUJOB_JOB_DIR=" + job_dir.encode() + b"\0"
    for pid in parents:
        if pid in skip or pid in found:
            continue
        st = _stat(pid)
        if len(st) < 5:
            continue
        if st[2] in leaders or st[3] in leaders:  # a process group or session a job process leads
            found.add(pid)
            continue
        if is_agent(pid):
            continue
        if st[4] == "0" and _under(pid, code, job):
            found.add(pid)
        elif gpu and pid in gpu and st[4] == "0" and started(pid) >= since - START_SLACK:
            env = procs._environ(pid)
            if b"GPUJOB_JOB_DIR=" not in env or mine in env:  # another job's GPU process is not ours
                found.add(pid)
    found = _descendants(found, parents) - skip
    return {p for p in found if procs.pid_alive(p)}
