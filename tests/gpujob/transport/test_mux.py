"""The connection multiplexer over a real sshd: one kept connection, safe sockets, clean recovery."""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from pathlib import Path

from tests.conftest import run_cli, stop_sshd
from tests.helpers import submit, write_job


def _ping(mux_dir: Path, within: float = 60) -> dict:
    """The daemon's answer, once one listens (a first command starts it in the background)."""
    from gpujob.transport.mux import _read_line, _request

    deadline = time.time() + within
    while True:
        socks = list(mux_dir.glob("*.sock"))
        assert len(socks) <= 1, socks
        try:
            s = _request(socks[0], {"op": "ping"}, timeout=5) if socks else None
        except OSError:  # bound but not yet listening, or a dead daemon's file
            s = None
        if s is not None:
            try:
                doc = _read_line(s)
            finally:
                s.close()
            if doc is not None:
                return doc
        assert time.time() < deadline, "no daemon answered"
        time.sleep(0.1)


def _daemons(mux_dir: Path) -> list[int]:
    """The live daemon processes serving a socket in ``mux_dir``."""
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit() and "gpujob.transport.muxd" in _safe_cmdline(int(p)) and str(mux_dir) in _safe_cmdline(int(p)):
            try:
                if Path(f"/proc/{p}/stat").read_text().split(")")[-1].split()[0] != "Z":
                    pids.append(int(p))
            except OSError:
                pass
    return pids


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _submit(tmp_path: Path, host: str) -> str:
    return submit(host, write_job(tmp_path, "m", "", "echo done"))["job_id"]


def test_commands_share_one_kept_connection(ssh_host: str, sshd, mux_dir: Path, tmp_path: Path) -> None:
    job = _submit(tmp_path, ssh_host)
    first = _ping(mux_dir)
    for _ in range(2):
        r = run_cli("status", job, "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["job_id"] == job
    again = _ping(mux_dir)
    assert again["ok"] and again["pid"] == first["pid"]  # the same daemon served every command
    # the kept agent answers exactly what a one-shot agent command does (once the job has ended)
    deadline = time.time() + 60
    while (served := json.loads(run_cli("status", job, "--json").stdout))["state"] != "succeeded":
        assert time.time() < deadline, served["state"]
        time.sleep(0.5)
    direct = run_cli("status", job, "--json", env_extra={"GPUJOB_MUX": "0"})
    assert direct.returncode == 0, direct.stderr
    one_shot = json.loads(direct.stdout)
    for doc in (served, one_shot):
        for k in ("now", "heartbeat_age_s"):
            doc.pop(k, None)
    assert served == one_shot
    # only this user reaches the socket, and the daemon's command line carries no host details
    assert stat.S_IMODE(os.stat(mux_dir).st_mode) == 0o700
    sock = next(mux_dir.glob("*.sock"))
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    assert str(sshd.port) not in _cmdline(first["pid"]) and "127.0.0.1" not in _cmdline(first["pid"])
    # the status verbs ran in the kept agent process: one `serve` on the instance
    root = str((tmp_path / "remote-root").resolve())
    serves = [p for p in os.listdir("/proc") if p.isdigit() and _safe_cmdline(int(p)).endswith(f"{root} serve ")]
    assert len(serves) == 1


def _safe_cmdline(pid: int) -> str:
    try:
        return _cmdline(pid)
    except OSError:
        return ""


def test_a_killed_daemon_or_dropped_link_is_replaced(ssh_host: str, sshd, mux_dir: Path, tmp_path: Path) -> None:
    job = _submit(tmp_path, ssh_host)
    pid = _ping(mux_dir)["pid"]
    os.kill(pid, signal.SIGKILL)  # leaves its socket file behind
    r = run_cli("status", job, "--json")
    assert r.returncode == 0, r.stderr
    pid2 = _ping(mux_dir)["pid"]
    assert pid2 != pid
    # the instance goes away under the kept connection: a clear error, then recovery when it is back
    from tests.conftest import start_sshd

    stop_sshd(sshd)
    r = run_cli("status", job, "--json")
    assert r.returncode == 3 and "refused the connection" in r.stdout and "Traceback" not in r.stderr + r.stdout
    s2 = start_sshd(sshd.dir, host_key=sshd.host_key, port=sshd.port)
    try:
        r = run_cli("status", job, "--json")
        assert r.returncode == 0, r.stderr
    finally:
        stop_sshd(s2)


def test_first_command_answers_on_its_own_and_leaves_one_daemon(ssh_host: str, sshd, mux_dir: Path, tmp_path: Path) -> None:
    """No daemon yet: the command connects itself and answers; the daemon it starts in the
    background serves the next command. Two first commands at once still leave one daemon."""
    job = _submit(tmp_path, ssh_host)
    pid = _ping(mux_dir)["pid"]
    assert run_cli("host", "disconnect", ssh_host, "--json").returncode == 0
    deadline = time.time() + 30
    while pid in _daemons(mux_dir):
        assert time.time() < deadline
        time.sleep(0.1)
    import subprocess
    import sys

    from tests.conftest import REPO

    env = dict(os.environ, PYTHONPATH=str(REPO))
    both = [subprocess.Popen([sys.executable, "-m", "gpujob.cli", "status", job, "--json"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env) for _ in range(2)]
    for p in both:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert json.loads(out)["job_id"] == job
    first = _ping(mux_dir)  # the event: the background daemon listens
    assert _daemons(mux_dir) == [first["pid"]]
    # the daemon opened the kept agent (`serve`) at once, for the next command
    root = str((tmp_path / "remote-root").resolve())

    def serves() -> list[str]:
        return [p for p in os.listdir("/proc") if p.isdigit() and _safe_cmdline(int(p)).endswith(f"{root} serve ")]

    while len(serves()) != 1:
        assert time.time() < deadline + 60, serves()
        time.sleep(0.1)
    # the next command goes through the daemon: it answers without importing paramiko
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpujob.cli", "status", job, "--json"], capture_output=True,
                       text=True, stdin=subprocess.DEVNULL, env=env, timeout=120)
    assert r.returncode == 0 and json.loads(r.stdout)["job_id"] == job, r.stderr[-2000:]
    assert "| paramiko" not in r.stderr
    assert len(serves()) == 1 and _ping(mux_dir)["pid"] == first["pid"]


def test_a_daemon_that_cannot_start_fails_no_command(ssh_host: str, mux_dir: Path, tmp_path: Path) -> None:
    """The daemon's socket name is taken by a folder, so no daemon can listen: every command
    still answers on a connection of its own, quietly."""
    from gpujob.config.hosts import HostStore
    from gpujob.transport.mux import _daemon_for

    daemon = _daemon_for(HostStore().get(ssh_host))
    assert daemon is not None
    daemon.path.mkdir()
    for _ in range(2):
        r = run_cli("ls", "--host", ssh_host, "--json")
        assert r.returncode == 0 and r.stderr == "", r.stderr
        assert json.loads(r.stdout)["jobs"] == []
    assert _daemons(mux_dir) == []
    daemon.path.rmdir()


def test_host_disconnect(ssh_host: str, mux_dir: Path) -> None:
    assert run_cli("ls", "--host", ssh_host).returncode == 0
    _ping(mux_dir)
    r = run_cli("host", "disconnect", ssh_host, "--json")
    assert json.loads(r.stdout) == {"host": ssh_host, "closed": True}
    assert not list(mux_dir.glob("*.sock"))
    assert json.loads(run_cli("host", "disconnect", ssh_host, "--json").stdout)["closed"] is False


def test_idle_daemon_leaves(ssh_host: str, mux_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("GPUJOB_MUX_PERSIST", "1")
    assert run_cli("ls", "--host", ssh_host).returncode == 0
    pid = _ping(mux_dir)["pid"]
    deadline = time.time() + 15
    while time.time() < deadline and (Path(f"/proc/{pid}").exists() or list(mux_dir.glob("*.sock"))):
        time.sleep(0.2)
    assert not list(mux_dir.glob("*.sock"))
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_unsafe_socket_folder_falls_back_to_direct(ssh_host: str, tmp_path: Path, monkeypatch) -> None:
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o755)
    monkeypatch.setenv("GPUJOB_MUX_DIR", str(d))
    from gpujob.config.hosts import HostStore
    from gpujob.transport import connect
    from gpujob.transport.ssh import SSHTransport

    t = connect(HostStore().get(ssh_host))
    try:
        assert isinstance(t, SSHTransport)
        assert t.run("echo ok").stdout == b"ok\n"
    finally:
        t.close()
    assert not list(d.iterdir())


def test_streams_and_exit_codes_through_the_daemon(ssh_host: str) -> None:
    from gpujob.config.hosts import HostStore
    from gpujob.transport import connect
    from gpujob.transport.mux import MuxTransport, start

    assert start(HostStore().get(ssh_host))
    t = connect(HostStore().get(ssh_host))
    assert isinstance(t, MuxTransport)
    r = t.run("cat; echo oops >&2; exit 7", input=b"x" * 300_000)
    assert (r.rc, len(r.stdout)) == (7, 300_000)
    assert r.stderr.endswith(b"oops\n")  # (after whatever this image's login shell prints)
    s = t.stream("read a; echo got $a; sleep 30")
    s.stdin.write(b"hello\n")
    s.stdin.flush()
    assert s.stdout.readline() == b"got hello\n"
    s.kill()  # closing our end ends the remote command
    t.close()


def test_a_link_frozen_while_idle_is_noticed(ssh_host: str, sshd, mux_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """A laptop that slept: the kept connection hears nothing; the next command checks it first
    (instead of waiting on the kept agent for ever) and connects afresh."""
    from tests.gpujob.usecases.test_tail import _proxied_host

    monkeypatch.setenv("GPUJOB_MUX_PROBE_AFTER", "0.5")
    proxy = _proxied_host(sshd.port, tmp_path)
    try:
        assert run_cli("ls", "--host", ssh_host).returncode == 0
        pid = _ping(mux_dir)["pid"]
        proxy.freeze()
        proxy.start()
        time.sleep(1)
        r = run_cli("ls", "--host", ssh_host, "--json", timeout=60)
        assert r.returncode == 0, r.stderr
        assert _ping(mux_dir)["pid"] != pid
    finally:
        proxy.kill()


def test_more_commands_than_the_server_multiplexes(tmp_path: Path, mux_dir: Path) -> None:
    """OpenSSH allows 10 sessions per connection by default: a command beyond that gets a
    connection of its own, and the kept one stays up for the others."""
    from gpujob.config.hosts import Host
    from gpujob.config.keys import public_key_line
    from gpujob.transport import connect
    from gpujob.transport.mux import MuxTransport, start
    from tests.conftest import start_sshd

    s = start_sshd(tmp_path / "sshd", max_sessions=2)
    try:
        s.authorize(public_key_line())
        small = Host(name="small", hostname="127.0.0.1", port=s.port, user=os.environ.get("USER", "root"), connect_timeout=5)
        assert start(small)
        t = connect(small)
        assert isinstance(t, MuxTransport)
        streams = [t.stream("read a; echo got $a") for _ in range(3)]  # the third is one too many
        for i, st in enumerate(streams):
            st.stdin.write(f"{i}\n".encode())
            st.close_stdin()
            assert st.stdout.read() == f"got {i}\n".encode()
            assert st.wait(30) == 0
            st.kill()
        assert t._direct is not None
        assert _ping(mux_dir)["ok"]
        t.close()
    finally:
        stop_sshd(s)
