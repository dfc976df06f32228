"""``gpujob exec`` (one command in the environment jobs get, streamed, its exit code) and
``gpujob ssh`` (OpenSSH through a managed ~/.ssh/config entry), on ``local`` and the real sshd."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, Sshd, run_cli, start_sshd, stop_sshd


def test_exec_runs_where_jobs_run(any_host: str) -> None:
    if any_host != "local":
        assert run_cli("host", "set", any_host, "--pip-index-url", "http://mirror.invalid/simple").returncode == 0
    r = run_cli("exec", any_host, "--", 'echo "index=${PIP_INDEX_URL:-none}"; command -v python; echo oops >&2; exit 7')
    assert r.returncode == 7, r.stderr
    lines = r.stdout.splitlines()
    if any_host != "local":
        assert lines[0] == "index=http://mirror.invalid/simple"
        assert lines[1] == str(Path(sys.executable).parent / "python")  # the profile's PATH prefix
    assert lines[-1] == "oops"  # stderr arrives in order with stdout
    if any_host != "local":  # the profile's settings reach the command on stdin, not on a command line (ps)
        r = run_cli("exec", any_host, "--", "tr '\\0' ' ' < /proc/$$/cmdline; echo; echo \"$PIP_INDEX_URL\"")
        shown, value = r.stdout.splitlines()[-2:]
        assert value == "http://mirror.invalid/simple" and "mirror.invalid" not in shown, r.stdout
    r = run_cli("exec", any_host, "--json", "--", "tr", "a-z", "A-Z", input="piped in\n")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["output"] == "PIPED IN\n" and doc["command"] == "tr a-z A-Z"


def test_exec_keeps_what_the_login_files_print_apart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()  # a platform's banner on stdout and a pyenv warning on stderr, as an instance's profile prints
    (home / ".bash_profile").write_text('echo "+---- Welcome to the instance ----+"\necho "pyenv: cannot rehash: lock" >&2\n')
    env = {"HOME": str(home)}
    r = run_cli("exec", "local", "--", "echo out; echo err >&2", env_extra=env)
    assert (r.returncode, r.stdout) == (0, "out\nerr\n") and "Welcome" not in r.stderr, r
    doc = json.loads(run_cli("exec", "local", "--json", "--", "echo out", env_extra=env).stdout)
    assert doc["output"] == "out\n", doc
    assert "Welcome to the instance" in doc["login_output"] and "pyenv: cannot rehash" in doc["login_output"]
    r = run_cli("exec", "local", "--", "echo partial; exit 4", env_extra=env)  # a failure shows them, as context
    assert r.returncode == 4 and r.stdout == "partial\n" and "pyenv: cannot rehash" in r.stderr, r


@pytest.fixture
def home_sshd(tmp_path: Path) -> Iterator[Sshd]:
    """An sshd whose sessions' HOME is the test's ``home``: its login files, never this account's."""
    (tmp_path / "home").mkdir(exist_ok=True)
    s = start_sshd(tmp_path / "sshd-home", set_env={"HOME": str(tmp_path / "home")})
    yield s
    stop_sshd(s)


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_exec_fails_when_the_login_files_end_the_shell_before_the_command(tmp_path: Path, where: str,
                                                                           request: pytest.FixtureRequest) -> None:
    """A MOTD script that ends `exit 0` in the login files: the command never ran, and exec said
    exit 0 with no output (issue 47). It now fails naming the login files; a command that runs
    keeps its exact bytes, its own exit status and `login_output`."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home)}
    host = "local"
    if where == "ssh":
        from gpujob.config.hosts import Host, HostStore
        from gpujob.config.keys import public_key_line

        sshd = request.getfixturevalue("home_sshd")
        sshd.authorize(public_key_line())
        HostStore().save(Host(name="motd", hostname="127.0.0.1", port=sshd.port, user=os.environ.get("USER", "root"),
                              root=str(tmp_path / "remote-root"), connect_timeout=5))
        host = "motd"
    (home / ".bash_profile").write_text('echo "+---- Welcome: GPU 0 is free ----+"\nexit 0\n')
    for args in ([], ["--json"]):
        r = run_cli("exec", host, *args, "--", "echo ran > ran.txt; echo ran", env_extra=env)
        said = r.stderr + r.stdout
        assert r.returncode == 2 and "the command did not run" in said and "~/.bash_profile" in said, (r.returncode, said)
        assert "Welcome: GPU 0 is free" in said and "Traceback" not in said, said
        assert "ran" not in r.stdout.replace("did not run", "")
    assert not (home / "ran.txt").exists()

    (home / ".bash_profile").write_text('echo "+---- Welcome: GPU 0 is free ----+"\n')  # the exit gone
    cmd = "printf 'gpujob-exec-starts-x.\\000\\377end'; exit 3"  # bytes like the mark's, a NUL, not UTF-8
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", "exec", host, "--", cmd], capture_output=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO), **env), stdin=subprocess.DEVNULL, timeout=120)
    assert r.returncode == 3 and r.stdout == b"gpujob-exec-starts-x.\x00\xffend", r
    doc = json.loads(run_cli("exec", host, "--json", "--", "echo out", env_extra=env).stdout)
    assert doc["output"] == "out\n" and doc["exit_code"] == 0 and "Welcome: GPU 0" in doc["login_output"], doc
    assert "gpujob-exec-starts" not in doc["login_output"], doc


def test_exec_streams_output_as_it_comes() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "exec", "local", "--", "echo first; read x; echo got $x"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout and p.stdin
        assert p.stdout.readline() == "first\n"  # printed while the command still waits for input
        p.stdin.write("more\n")
        p.stdin.close()
        assert p.stdout.read() == "got more\n" and p.wait(30) == 0
    finally:
        if p.poll() is None:
            p.kill()


def test_exec_without_a_command() -> None:
    r = run_cli("exec", "local")
    assert r.returncode == 2 and "gpujob exec HOST -- " in r.stderr


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's client")
def test_ssh_writes_a_marked_entry_and_runs_openssh(ssh_host: str, tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host mine\n    HostName example.com\n")
    assert run_cli("exec", ssh_host, "--", "true").returncode == 0  # gpujob records the host key first
    r = run_cli("ssh", ssh_host, "--print", "--json", "--ssh-config", str(cfg))
    doc = json.loads(r.stdout)
    assert "Host gpujob-box" in doc["block"] and doc["argv"][-1] == "gpujob-box"
    assert cfg.read_text() == "Host mine\n    HostName example.com\n"  # --print writes nothing
    for _ in range(2):
        r = run_cli("ssh", ssh_host, "--ssh-config", str(cfg), "--", "echo", "hello-from-openssh", timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "hello-from-openssh", r.stderr
    text = cfg.read_text()
    assert text.startswith("Host mine\n    HostName example.com\n") and text.count("Host gpujob-box") == 1
    assert oct(cfg.stat().st_mode & 0o777) == "0o600"
    r = run_cli("ssh", ssh_host, "--ssh-config", str(cfg), "--", "exit", "5", timeout=60)
    assert r.returncode == 5
    # a HOME that is not the account's: OpenSSH reads the passwd home's config, so gpujob names its own
    home = tmp_path / "home"
    r = run_cli("ssh", ssh_host, "--", "echo", "via-home", timeout=60, env_extra={"HOME": str(home)})
    assert r.returncode == 0 and r.stdout.strip() == "via-home", r.stderr
    assert "Host gpujob-box" in (home / ".ssh" / "config").read_text()
    # nothing left running: OpenSSH replaced gpujob and exited (no master connection stays behind)
    assert not [d for d in Path("/proc").glob("[0-9]*") if str(cfg).encode() in _cmdline(d)]


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""
