"""Fixtures with real parts: an OpenSSH sshd on 127.0.0.1, isolated gpujob config and roots."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.bytecode import share_bytecode
from tests.pyenvlock import sweep_in_background
from tests.schedule import pytest_collection_modifyitems, pytest_configure  # noqa: F401 - the parallel run's order

REPO = Path(__file__).resolve().parent.parent

# A suite started in the background of a non-interactive shell (`cmd &`, nohup) inherits SIGINT
# ignored, and so would every program the tests start: the Ctrl-C tests would see a CLI that cannot
# be interrupted. The tests' processes get the disposition a terminal user's have.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if not os.environ.get("PYTEST_XDIST_WORKER"):
    sweep_in_background()  # one sweeper for the run, in the controller (tests/pyenvlock.py)
share_bytecode()  # before xdist starts its workers: they and every process they start share it
# one compute thread a process (torch, numpy, tokenizers) for every process of the run, the fixtures'
# servers and the workers themselves included: four workers on two cores, each process's second thread
# would spin waiting for a core (OpenMP's busy wait) instead of leaving it to another test
for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")
SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


@dataclass
class Sshd:
    """A running sshd: its port, folder and files."""

    port: int
    dir: Path
    host_key: Path
    authorized_keys: Path
    proc: subprocess.Popen

    def authorize(self, pubkey_line: str) -> None:
        with open(self.authorized_keys, "a") as f:
            f.write(pubkey_line.strip() + "\n")

    def ssh_line(self) -> str:
        return f"ssh -p {self.port} {os.environ.get('USER', 'root')}@127.0.0.1"


# The sessions' shell as this image's .bashrc leaves it, without running it: bash sources ~/.bashrc for a
# command sshd runs only at shell level 1 (SHLVL=1 makes it 2), and this image's runs `pyenv init`
# (0.2 s of CPU a login, a rehash lock shared by all) and puts pyenv's shims first (0.1 s a `python`);
# the interpreter's own folder first instead. A test of login files sets its own HOME and SHLVL.
# `bash -lc` (jobs, setup, probes) still runs `pyenv init`: as in `isolated`, a rehash gives up after
# 1 s on a lock a killed shell left (tests/pyenvlock.py removes it) instead of waiting 60 s.
LOGIN_ENV = {"SHLVL": "1", "PYENV_REHASH_TIMEOUT": "1",
             "PATH": f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def start_sshd(base: Path, host_key: Path | None = None, port: int | None = None, max_sessions: int = 50,
               tcp_forwarding: bool = True, set_env: dict[str, str] | None = None, extra: str = "") -> Sshd:
    """Start sshd on 127.0.0.1 with its own host key and authorized_keys file. ``set_env``: more
    variables for the sessions (``HOME`` too: login files of the test's own); ``extra``: sshd_config
    lines that come first (sshd keeps a keyword's first value), e.g. ``AuthenticationMethods ...``."""
    if SSHD is None:
        if os.environ.get("CI"):
            pytest.fail("sshd is not installed: CI must install openssh-server (see .ci/run)")
        pytest.skip("sshd not installed (apt-get install openssh-server)")
    base.mkdir(parents=True, exist_ok=True)
    if host_key is None:
        host_key = base / "ssh_host_ed25519_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    ak = base / "authorized_keys"
    ak.touch()
    ak.chmod(0o600)
    port = port or free_port()
    cfg = base / "sshd_config"
    login = {} if "HOME" in (set_env or {}) else LOGIN_ENV  # a HOME of the test's own: its login files are the point
    env = " ".join(f"{k}={v}" for k, v in {**login, **(set_env or {})}.items())
    cfg.write_text(
        (extra.strip() + "\n" if extra.strip() else "") +
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nAuthorizedKeysFile {ak}\n"
        f"PidFile {base / 'sshd.pid'}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
        f"AllowTcpForwarding {'yes' if tcp_forwarding else 'no'}\n"
        f"ClientAliveInterval 0\nMaxSessions {max_sessions}\nMaxStartups 50\n"
        # OMP_NUM_THREADS: as in `isolated`, for the jobs this host runs
        f"SetEnv OMP_NUM_THREADS=1 {env}\nLogLevel ERROR\n"
    )
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg)], stderr=open(base / "sshd.log", "ab"))
    wait_port(port)
    return Sshd(port, base, host_key, ak, proc)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (by parent links in /proc)."""
    from remote.core.procs import _parents

    children: dict[int, list[int]] = {}
    for p, pp in _parents().items():
        children.setdefault(pp, []).append(p)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def stop_sshd(s: Sshd) -> None:
    """Stop sshd and its open sessions, as when an instance goes away (jobs started with
    setsid live on: they were handed to init)."""
    sessions = _descendants(s.proc.pid)
    s.proc.terminate()
    try:
        s.proc.wait(5)
    except subprocess.TimeoutExpired:
        s.proc.kill()
    from remote.core.procs import pid_alive

    for sig in (15, 9):  # TERM first: a login shell gets to run its exit traps
        for pid in sessions:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.time() + 1.0
        while sig == 15 and time.time() < deadline and any(pid_alive(p) for p in sessions):
            time.sleep(0.05)


def job_processes_under(folder: Path) -> set[int]:
    """Processes of jobs under ``folder``: by ``GPUJOB_JOB_DIR`` in their environment (trainers),
    by the folder on a ``-m remote`` command line (supervisors, the agent's helpers)."""
    from remote.core.procs import _cmdline, _environ, _parents

    paths = {str(folder).encode() + b"/", os.path.realpath(folder).encode() + b"/"}  # not test_x01 for test_x0
    mine = {os.getpid(), os.getppid()}
    found = set()
    for pid in _parents():
        if pid in mine:
            continue
        env = _environ(pid)
        cmd = _cmdline(pid)
        if any(b"GPUJOB_JOB_DIR=" + p in env for p in paths) or (b"remote\0" in cmd and any(p in cmd for p in paths)):
            found.add(pid)
    return found


def kill_job_processes(folder: Path) -> list[int]:
    """SIGKILL every job process under ``folder`` (a failed test leaves none running)."""
    return _sigkill(job_processes_under(folder))


def _sigkill(pids: set[int]) -> list[int]:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    return sorted(pids)


def _another_run_alive() -> bool:
    """A pytest process that is neither this one nor one of its ancestors (a wrapper's command line)."""
    from remote.core.procs import _cmdline, _parents

    parents = _parents()
    mine, pid = set(), os.getpid()
    while pid > 1 and pid not in mine:
        mine.add(pid)
        pid = parents.get(pid, 1)

    def runs_pytest(pid: int) -> bool:
        argv = _cmdline(pid).split(b"\0")
        return any(os.path.basename(a) in (b"pytest", b"py.test") for a in argv) or b"pytest" in argv[1:3]

    return any(runs_pytest(p) for p in parents if p not in mine)


def pytest_sessionstart(session: pytest.Session) -> None:
    """A run killed before its teardowns (Ctrl-C twice, a CI timeout) leaves its jobs running under its
    folders; the next run ends them before it starts, unless another run is live (they may be its)."""
    if os.environ.get("PYTEST_XDIST_WORKER") or session.config.option.basetemp or _another_run_alive():
        return
    import getpass
    import tempfile

    from remote.core.procs import _cmdline, _parents

    earlier = Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"
    if not earlier.is_dir():
        return
    named = str(earlier).encode() + b"/"  # no process of this run exists yet: its sshds, servers, jobs
    _sigkill(job_processes_under(earlier) | {p for p in _parents() if named in _cmdline(p) and p != os.getpid()})


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own config folder (profiles, keys, known_hosts), state and cache folders, and
    local root; no job process of the test outlives it, whatever its outcome."""
    cfg = tmp_path / "config"
    monkeypatch.setenv("GPUJOB_CONFIG_DIR", str(cfg))
    monkeypatch.setenv("GPUJOB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUJOB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GPUJOB_LOCAL_ROOT", str(tmp_path / "local-root"))
    monkeypatch.setenv("GPUJOB_CONNECT_RETRIES", "1")
    monkeypatch.setenv("GPUJOB_NO_SSH_AGENT", "1")
    monkeypatch.setenv("GPUJOB_HEARTBEAT", "1")
    monkeypatch.setenv("GPUJOB_PREFLIGHT", "0")  # a new host's first submit measures it; tests/remote/host/test_preflight.py does
    # this image's login shells run `pyenv rehash`, which waits up to 60 s on a lock file
    # that a job killed mid-start can leave behind
    monkeypatch.setenv("PYENV_REHASH_TIMEOUT", "1")
    # the tests' models are tiny: torch's second thread a process mostly spins, a quarter of the CPU
    # of every training job on 2 shared cores (a job's own env: still wins)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield cfg
    kill_job_processes(tmp_path)
    _remove_job_cgroups(tmp_path)


def _remove_job_cgroups(tmp_path: Path) -> None:
    """The per-job cgroups (remote/stopping/cgroup.py) of the test's jobs, emptied just above."""
    from remote.stopping import cgroup

    for jobs in tmp_path.glob("*/jobs"):
        for job in jobs.iterdir():
            for _ in range(20):  # a killed process leaves its cgroup a moment later
                cgroup.remove_for(str(job))
                if not os.path.exists(cgroup.path_for(str(job)) or ""):
                    break
                time.sleep(0.05)


@pytest.fixture(autouse=True)
def mux_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The multiplexer's sockets in a short private folder of the test's own; its daemons leave with it."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="gjmux"))
    monkeypatch.setenv("GPUJOB_MUX_DIR", str(d))
    yield d
    import fcntl

    from gpujob.transport.mux import _request

    for lock in d.glob("*.lock"):  # a daemon started in the background holds it until it listens
        with open(lock, "a") as lk:
            deadline = time.monotonic() + 30
            while True:
                try:
                    fcntl.flock(lk, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
    for sock in d.glob("*.sock"):
        try:
            _request(sock, {"op": "exit"}, timeout=5).close()
        except OSError:
            pass
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def sshd(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Sshd]:
    """The test's sshd; ``parametrize("sshd", [{"tcp_forwarding": False}], indirect=True)`` passes options."""
    s = start_sshd(tmp_path / "sshd", **getattr(request, "param", {}))
    yield s
    stop_sshd(s)


@pytest.fixture
def ssh_host(sshd: Sshd, tmp_path: Path) -> str:
    """A host profile ``box`` reaching the test sshd with gpujob's own key, root in a temp folder.

    The job's login shell gets this interpreter's folder first on PATH (host env
    GPUJOB_PATH_PREFIX), as a conda env would on an instance.
    """
    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.keys import public_key_line

    sshd.authorize(public_key_line())
    host = Host(name="box", hostname="127.0.0.1", port=sshd.port, user=os.environ.get("USER", "root"),
                root=str(tmp_path / "remote-root"), env={"GPUJOB_PATH_PREFIX": str(Path(sys.executable).parent)},
                connect_timeout=5)
    HostStore().save(host)
    return "box"


@pytest.fixture(params=["local", "ssh"])
def any_host(request: pytest.FixtureRequest) -> str:
    """Each end-to-end test runs on the built-in ``local`` host and over real SSH."""
    if request.param == "local":
        return "local"
    return request.getfixturevalue("ssh_host")


def run_cli(*args: str, input: str | None = None, timeout: float = 120,
            env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``gpujob ARGS`` as a real process (the environment carries the test's isolation)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "gpujob.cli", *args], input=input, capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=None if input is not None else subprocess.DEVNULL)


@pytest.fixture
def hook() -> Iterator[object]:
    """A real HTTP server that records notification requests (tests.remote.run.test_events.Hook)."""
    from tests.remote.run.test_events import Hook

    h = Hook()
    yield h
    h.server.shutdown()
    h.server.server_close()
