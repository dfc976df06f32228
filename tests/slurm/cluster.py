"""A real Slurm cluster (Debian's Slurm 22.05) in a temp folder, for the tests: one ``slurmctld`` and
one ``slurmd`` per node, all on 127.0.0.1, without systemd or munge (auth/none, cred/none, as root).

Each start is hermetic: its own ClusterName, ports and folder (``gjslurm-<maker pid>-*`` under the
temp dir; short, as slurmd's sockets live in it). Every daemon and job of a cluster carries its
``SLURM_CONF`` in its environment (slurmd sets it even for ``--export=NONE`` jobs), which is how
``stop_cluster`` and the next start's leftover sweep find them all.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import Sshd, free_port

PREFIX = "gjslurm-"
DAEMONS = ("slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "srun", "sinfo")


def _bin(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None)


def require_slurm() -> None:
    """Skip the test where Slurm is missing or this is not root; in CI, fail it (.ci/run installs it)."""
    missing = [b for b in DAEMONS + CLIENTS if _bin(b) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"Slurm is not installed ({', '.join(missing)}): CI must install slurmctld slurmd slurm-client (see .ci/run)")
        pytest.skip("Slurm not installed (apt-get install slurmctld slurmd slurm-client)")
    if os.geteuid() != 0:  # SlurmUser=root, and slurmd starts jobs as their user
        if os.environ.get("CI"):
            pytest.fail("the Slurm tests run as root in CI")
        pytest.skip("the Slurm cluster needs root (its daemons run as root)")


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without any SLURM_* (a suite run inside a Slurm job must not
    reach that cluster), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(extra)
    return env


@dataclass
class Cluster:
    """A running cluster: ``env`` is what every client command needs (``run`` adds it)."""

    name: str
    folder: Path
    conf: Path
    ctld_port: int
    node_ports: dict[str, int]  # node name -> its slurmd's port
    env: dict[str, str] = field(default_factory=dict)

    @property
    def nodes(self) -> list[str]:
        return list(self.node_ports)

    def run(self, *args: str, timeout: float = 30, check: bool = False, cwd: Path | str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """A client command (``sbatch``, ``squeue``...) against this cluster; text output."""
        return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=check, cwd=cwd,
                              env=_clean_env({**self.env, **(env or {})}), stdin=subprocess.DEVNULL)

    def squeue_ids(self) -> list[str]:
        """The jobs squeue lists (pending, running, completing...; not those ended)."""
        r = self.run("squeue", "-h", "-o", "%i")
        if r.returncode != 0:
            raise RuntimeError(f"squeue failed: {r.stderr.strip()}\n{self.log_tail()}")
        return r.stdout.split()

    def job_field(self, job_id: str, key: str) -> str:
        """One field of ``scontrol show job`` (``JobState``, ``Reason``, ``Restarts``, ``ExitCode``...);
        jobs ended stay there for MinJobAge (300 s)."""
        r = self.run("scontrol", "-o", "show", "job", job_id)
        m = re.search(rf"(?:^| ){re.escape(key)}=(\S*)", r.stdout)
        if r.returncode != 0 or not m:
            raise RuntimeError(f"no {key} for job {job_id}: {(r.stdout + r.stderr).strip()[:500]}")
        return m.group(1)

    def wait_state(self, job_id: str, states: Iterable[str], timeout: float = 30) -> str:
        """Wait until the job's JobState is one of ``states``; that state."""
        want = set(states)
        deadline = time.monotonic() + timeout
        while True:
            state = self.job_field(job_id, "JobState")
            if state in want:
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is {state}, not {'/'.join(sorted(want))}, after {timeout} s\n{self.log_tail()}")
            time.sleep(0.05)

    def node_states(self) -> dict[str, str]:
        """Each node's state as sinfo shows it (``idle``, ``mixed``, ``allocated``; ``*`` appended:
        not responding). A node in several partitions is listed once per partition: the same state."""
        r = self.run("sinfo", "-h", "-N", "-o", "%N %T")
        return dict(line.split(None, 1) for line in r.stdout.splitlines() if line.strip()) if r.returncode == 0 else {}

    def wait_idle(self, timeout: float = 30) -> None:
        """Wait until every node is idle (registered, no job on it)."""
        deadline = time.monotonic() + timeout
        while True:
            # a dead daemon first: sinfo retries a slurmctld that is gone for MessageTimeout (10 s)
            dead = [f"{d} ({p})" for d, p in self.daemon_pids().items() if p and not _alive(p)]  # 0: no pid file yet
            states = {} if dead else self.node_states()
            if states and all(states.get(n) == "idle" for n in self.nodes):
                return
            taken = self.port_taken()  # slurmctld exits on it, slurmd retries the bind for minutes
            if dead or taken or time.monotonic() > deadline:
                why = f"{', '.join(dead)} exited" if dead else f"port {taken} taken" if taken else f"not idle after {timeout} s"
                raise RuntimeError(f"Slurm cluster {self.name}: {why}: nodes {states or 'unknown'}\n{self.log_tail()}")
            time.sleep(0.05)

    def requeue(self, job_id: str, timeout: float = 30) -> None:
        """What a preemption does: the job is stopped and queued again; it starts again at once.

        22.05 holds a requeued job two minutes (Reason=BeginTime; set when it leaves COMPLETING,
        so a StartTime=now sent before then is overwritten) because the requeue revokes the job's
        launch credential: slurmd refuses a credential made in the same second as, or before, the
        revocation ("Job credential revoked", the job then ends FAILED). So: wait for PENDING and
        for the next second, then start it."""
        r = self.run("scontrol", "requeue", job_id)
        if r.returncode != 0:
            raise RuntimeError(f"scontrol requeue {job_id}: {r.stderr.strip()}")
        self.release(job_id, time.time(), timeout)

    def release(self, job_id: str, revoked: float, timeout: float = 30) -> None:
        """Start a requeued job at once instead of after Slurm's two-minute hold (see ``requeue``);
        ``revoked``: a time at or after the requeue (the credential's revocation, whole seconds)."""
        self.wait_state(job_id, {"PENDING"}, timeout)
        time.sleep(max(0.0, int(revoked) + 1.05 - time.time()))
        r = self.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")
        if r.returncode != 0:
            raise RuntimeError(f"scontrol update JobId={job_id} StartTime=now: {r.stderr.strip()}")

    def daemon_pids(self) -> dict[str, int]:
        """``slurmctld`` and ``slurmd.<node>`` -> pid, from their pid files (0: none yet)."""
        out = {}
        for name in ["ctld", *(f"slurmd.{n}" for n in self.nodes)]:
            try:
                out["slurmctld" if name == "ctld" else name] = int((self.folder / f"{name}.pid").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                out["slurmctld" if name == "ctld" else name] = 0
        return out

    def port_taken(self) -> str:
        """A port a daemon found in use (its log says so), or ""."""
        for log in (self.folder / "log").glob("*.log"):
            try:
                m = re.search(r"Address already in use|Unable to bind listen port \((\d+)\)", log.read_text(errors="replace"))
            except OSError:
                continue
            if m:
                return m.group(1) or log.name
        return ""

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of each daemon's log (for error messages)."""
        parts = []
        for log in sorted((self.folder / "log").glob("*.log")):
            try:
                tail = log.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            parts.append(f"--- {log}\n" + "\n".join(tail))
        return "\n".join(parts) or f"(no logs in {self.folder / 'log'})"


@dataclass
class SlurmLogin:
    """A cluster's login node: ``host`` names the gpujob profile that reaches it (scheduler slurm,
    partition debug); ``shared`` is the profile's root, the "shared file system" of the nodes."""

    cluster: Cluster
    sshd: Sshd
    host: str
    shared: Path
    user: str

    def ssh(self, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """``command`` (a shell line) in a session on the login node, with gpujob's key."""
        from gpujob.config.keys import ensure_client_key

        return subprocess.run(
            ["ssh", "-p", str(self.sshd.port), "-i", str(ensure_client_key()), "-o", "StrictHostKeyChecking=no",
             "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
             f"{self.user}@127.0.0.1", command],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def sbatch(self, *args: str) -> str:
        """``sbatch --parsable ARGS`` on the login node; the job id."""
        r = self.ssh(shlex.join(["sbatch", "--parsable", *args]))
        if r.returncode != 0:
            raise RuntimeError(f"sbatch on the login node failed ({r.returncode}): {r.stderr.strip()}")
        return r.stdout.strip().split(";", 1)[0]


def _alive(pid: int) -> bool:
    from remote.core.procs import pid_alive

    return pid_alive(pid)


def _hostname() -> str:
    return socket.gethostname().split(".", 1)[0]  # slurmctld checks SlurmctldHost against its short name


def _conf_text(c: Cluster, kill_wait: int, max_time: str, partitions: Iterable[str], cpus: int) -> str:
    host, d = _hostname(), c.folder
    nodes = "".join(f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} CPUs={cpus} RealMemory=1000 State=UNKNOWN\n"
                    for n, p in c.node_ports.items())
    return (
        f"ClusterName={c.name}\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={c.ctld_port}\n"
        f"SlurmdPort={next(iter(c.node_ports.values()))}\n"
        "AuthType=auth/none\nCredType=cred/none\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        "SchedulerType=sched/backfill\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
        # the nodes' declared CPUs whatever this machine has (CI: 2 cores for two 2-CPU nodes)
        "SlurmdParameters=config_overrides\n"
        "SchedulerParameters=batch_sched_delay=0\n"
        f"StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool/%n\n"
        f"SlurmctldPidFile={d}/ctld.pid\nSlurmdPidFile={d}/slurmd.%n.pid\n"
        f"SlurmctldLogFile={d}/log/ctld.log\nSlurmdLogFile={d}/log/slurmd.%n.log\n"
        "SlurmUser=root\nSlurmdUser=root\nReturnToService=2\nMpiDefault=none\nJobCompType=jobcomp/none\n"
        f"AccountingStorageType=accounting_storage/none\nKillWait={kill_wait}\nMinJobAge=300\n"
        f"{nodes}"
        f"PartitionName=debug Nodes={','.join(c.node_ports)} Default=YES MaxTime={max_time} State=UP\n"
        + "".join(p.strip() + "\n" for p in partitions)
    )


def _start_daemons(c: Cluster, timeout: float) -> None:
    env = _clean_env(c.env)
    argvs = [[_bin("slurmctld") or "slurmctld", "-f", str(c.conf)]]
    argvs += [[_bin("slurmd") or "slurmd", "-f", str(c.conf), "-N", n] for n in c.nodes]
    for argv in argvs:  # each forks its daemon and returns
        r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}\n{c.log_tail()}")
    c.wait_idle(timeout)


def start_cluster(nodes: int = 1, *, kill_wait: int = 10, max_time: str = "INFINITE", partitions: Iterable[str] = (),
                  cpus: int = 2, timeout: float = 30) -> Cluster:
    """A cluster of ``nodes`` (1 or 2) nodes ``n1``, ``n2`` with ``cpus`` CPUs each, in partition
    ``debug`` (default, MaxTime ``max_time``, e.g. "10:00"), every node idle. ``partitions``: more
    partition lines, e.g. ``"PartitionName=small Nodes=n1,n2 MaxNodes=1 State=UP"``. ``kill_wait``:
    seconds between a job's SIGTERM and SIGKILL. Stop it with ``stop_cluster``."""
    require_slurm()
    if nodes not in (1, 2):
        raise ValueError(f"nodes must be 1 or 2, not {nodes}")
    clean_leftovers()
    parts = list(partitions)
    for attempt in range(3):  # free_port's port may be taken by another worker before a daemon binds it
        folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
        for sub in ("state", "log", *(f"spool/n{i}" for i in range(1, nodes + 1))):
            (folder / sub).mkdir(parents=True)
        conf = folder / "slurm.conf"
        c = Cluster(name=f"gj{uuid.uuid4().hex[:10]}", folder=folder, conf=conf, ctld_port=free_port(),
                    node_ports={f"n{i}": free_port() for i in range(1, nodes + 1)}, env={"SLURM_CONF": str(conf)})
        conf.write_text(_conf_text(c, kill_wait, max_time, parts, cpus))
        try:
            _start_daemons(c, timeout)
            return c
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            in_use = bool(c.port_taken())
            stop_cluster(c, keep_logs=None if in_use and attempt < 2 else folder.with_name(folder.name + "-failed"))
            if not in_use or attempt == 2:
                raise RuntimeError(f"Slurm cluster did not start (logs kept in {folder}-failed): {e}") from None
    raise AssertionError("unreachable")


# --- finding and ending a cluster's processes -------------------------------------------------------

def _proc_info(pid: int) -> tuple[bytes, bytes, str]:
    """cmdline, environ, cwd of ``pid`` (empty where unreadable)."""
    from remote.core.procs import _cmdline, _environ

    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = ""
    return _cmdline(pid), _environ(pid), cwd


def _ours(pids: set[int]) -> set[int]:
    """Every process below ``pids`` too (a job that cleared its environment is still slurmstepd's child)."""
    from remote.core.procs import _parents

    children: dict[int, list[int]] = {}
    for p, pp in _parents().items():
        children.setdefault(pp, []).append(p)
    out, todo = set(pids), list(pids)
    while todo:
        for ch in children.get(todo.pop(), []):
            if ch not in out:
                out.add(ch)
                todo.append(ch)
    return out


def _protected() -> set[int]:
    """This process and its ancestors: never signalled, whatever their environment holds."""
    from remote.core.procs import _parents

    parents, out, pid = _parents(), set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        pid = parents.get(pid, 0)
    return out | {1}


def _folder_of(cmdline: bytes, environ: bytes, cwd: str) -> str | None:
    """The ``gjslurm-*`` cluster folder a process belongs to: its daemon's ``-f`` config, the
    ``SLURM_CONF`` in its environment (slurmscriptd, slurmstepd, jobs), or its working folder."""
    base = re.escape(os.path.join(tempfile.gettempdir(), PREFIX).encode())
    pat = base + rb"[^/\0]+"
    for text, rx in ((cmdline, rb"(?:^|\0)(" + pat + rb")/"), (environ, rb"(?:^|\0)SLURM_CONF=(" + pat + rb")/"),
                     (cwd.encode(), rb"^(" + pat + rb")(?:/|$)")):
        m = re.search(rx, text)
        if m:
            return m.group(1).decode(errors="replace")
    return None


def cluster_processes(c: Cluster) -> set[int]:
    """Live processes of this cluster: its daemons, slurmscriptd, slurmstepd and the jobs' processes
    (by SLURM_CONF, by the folder on their command line or as working folder), and their descendants."""
    from remote.core.procs import _parents, pid_alive

    folder = str(c.folder)
    found = {pid for pid in c.daemon_pids().values() if pid_alive(pid)}
    for pid in _parents():
        cmd, env, cwd = _proc_info(pid)
        if (_folder_of(cmd, env, cwd) == folder or b"SLURM_CONF=" + str(c.conf).encode() + b"\0" in env
                or b"SLURM_CLUSTER_NAME=" + c.name.encode() + b"\0" in env):
            found.add(pid)
    return {p for p in _ours(found) - _protected() if pid_alive(p)}


def _signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _end(find: Callable[[], set[int]], term_s: float) -> set[int]:
    """TERM what ``find()`` returns, wait up to ``term_s``, then KILL what is left (found again:
    slurmstepd forks on); what is still alive after that (none, but for a process stuck in D)."""
    from remote.core.procs import pid_alive

    _signal_all(find(), signal.SIGTERM)
    deadline = time.monotonic() + term_s
    while time.monotonic() < deadline and find():
        time.sleep(0.05)
    for _ in range(3):
        left = find()
        if not left:
            return set()
        _signal_all(left, signal.SIGKILL)
        end = time.monotonic() + 2
        while time.monotonic() < end and any(pid_alive(p) for p in left):
            time.sleep(0.02)
    return find()


SLURM_COMMS = {"slurmctld", "slurmscriptd", "slurmd", "slurmstepd"}


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def job_processes(c: Cluster) -> set[int]:
    """The jobs' own processes (batch scripts, their steps' tasks, what they started): the
    cluster's processes but for its daemons and slurmstepd."""
    return {p for p in cluster_processes(c) if _comm(p) not in SLURM_COMMS}


def stop_cluster(c: Cluster, keep_logs: Path | None = None, job_wait: float = 10) -> None:
    """Cancel every job, stop the daemons, kill whatever of the cluster is left; copy its logs to
    ``keep_logs`` (where given) and remove its folder. Nothing of it outlives this call."""
    try:
        ids = c.squeue_ids() if _alive(c.daemon_pids().get("slurmctld", 0)) else []
    except (RuntimeError, subprocess.TimeoutExpired):
        ids = []
    if ids:
        c.run("scancel", *ids)
        # scancel's SIGTERM, SIGKILL after KillWait (scancel --signal=KILL is a cancel too, the same
        # wait): a job ignoring SIGTERM would hold the teardown KillWait seconds. Its processes are
        # killed here; slurmstepd, left alone, then reports the job done.
        deadline = time.monotonic() + job_wait
        while time.monotonic() < deadline:
            _signal_all(job_processes(c), signal.SIGKILL)
            try:
                if not c.squeue_ids():
                    break
            except (RuntimeError, subprocess.TimeoutExpired):
                break
            time.sleep(0.1)
    daemons = {p for p in c.daemon_pids().values() if _alive(p)}
    _end(lambda: {p for p in daemons if _alive(p)}, 5)
    left = _end(lambda: cluster_processes(c), 2)
    if keep_logs is not None:
        shutil.copytree(c.folder / "log", keep_logs, dirs_exist_ok=True)
    shutil.rmtree(c.folder, ignore_errors=True)
    if left:
        raise RuntimeError(f"Slurm cluster {c.name}: processes {sorted(left)} outlived SIGKILL")


def clean_leftovers() -> None:
    """Clusters of a killed earlier run: their processes killed, their folders removed. A folder names
    the test process that made it (``gjslurm-<pid>-``): one whose maker lives belongs to a run going
    on beside this one (another xdist worker) and is left alone; a process of a folder gone goes too."""
    from remote.core.procs import _parents, pid_alive

    def stale(folder: str) -> bool:
        maker = os.path.basename(folder)[len(PREFIX):].split("-", 1)[0]
        return not os.path.isdir(folder) or not maker.isdigit() or not pid_alive(int(maker))

    victims: set[int] = set()
    for pid in _parents():
        folder = _folder_of(*_proc_info(pid))
        if folder and stale(folder):
            victims.add(pid)
    if victims:
        victims = _ours(victims) - _protected()
        _signal_all(victims, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(pid_alive(p) for p in victims):
            time.sleep(0.02)
    for folder in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        if stale(str(folder)):
            shutil.rmtree(folder, ignore_errors=True)
