"""Every login failure said as what it is (issue 47), against a real sshd configured as a user's
host can be: a refused key of any type is named as refused (an RSA key read "Invalid key → is
the instance powered on?"); a key accepted with a second factor asked is said so, the key
fine (it read "refused gpujob's key" and offered a re-install with the password); a policy
gpujob cannot meet (no common algorithm, no key login at all) is the server's, never "is the
instance powered on?". Each through the real CLI: exit 3 (or 2 before any connection), the
cause and the next step, no traceback."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpujob.config.hosts import Host, HostStore
from gpujob.config.keys import public_key_line
from tests.conftest import Sshd, run_cli

USER = os.environ.get("USER", "root")
SECOND_FACTOR = ["AuthenticationMethods publickey,keyboard-interactive\nKbdInteractiveAuthentication yes",
                 "AuthenticationMethods publickey,password\nPasswordAuthentication yes"]


def _profile(sshd: Sshd, name: str = "box", identity: Path | None = None) -> str:
    HostStore().save(Host(name=name, hostname="127.0.0.1", port=sshd.port, user=USER, connect_timeout=5,
                          identity_file=str(identity) if identity else None))
    return name


def _keygen(path: Path, kind: str, passphrase: str = "") -> Path:
    bits = ["-b", "2048"] if kind == "rsa" else []
    subprocess.run(["ssh-keygen", "-q", "-t", kind, *bits, "-N", passphrase, "-f", str(path)], check=True)
    return path


def _clear(r: subprocess.CompletedProcess) -> str:
    """The failure's text, checked for what no login failure may say once the host answered."""
    assert "Traceback" not in r.stderr and "Invalid key" not in r.stderr, r.stderr
    assert "powered on" not in r.stderr and "after 1 tries" not in r.stderr, r.stderr
    assert "→" in r.stderr, r.stderr  # a next step
    return r.stderr


@pytest.mark.parametrize("kind", ["rsa", "ecdsa", "ed25519"])
def test_a_refused_key_is_named_refused_whatever_its_type(sshd: Sshd, tmp_path: Path, kind: str) -> None:
    key = _keygen(tmp_path / f"id_{kind}", kind)  # the user's key, not in the host's authorized_keys
    sshd.authorize(public_key_line())  # another key is: the host is up and takes keys
    _profile(sshd, identity=key)
    r = run_cli("exec", "box", "--", "true")
    err = _clear(r)
    name = {"rsa": "ssh-rsa", "ecdsa": "ecdsa-sha2-nistp256", "ed25519": "ssh-ed25519"}[kind]
    assert r.returncode == 3 and f"refused the key ({key}, {name} SHA256:" in err, err
    assert f"{key}.pub" in err and "authorized_keys" in err, err

    r = run_cli("host", "add", "new", "--ssh", sshd.ssh_line(), "--identity", str(key))
    err = _clear(r)  # the user's own key: no password asked (gpujob's key would not be this one)
    assert r.returncode == 3 and "refused the key" in err and "nothing was saved" in err, err
    assert "password" in err and "without --identity" in err, err
    assert "new" not in {h.name for h in HostStore().all()}


def test_gpujobs_own_key_refused_keeps_the_password_remedy(sshd: Sshd, tmp_path: Path) -> None:
    _profile(sshd)
    r = run_cli("exec", "box", "--", "true")
    err = _clear(r)
    assert r.returncode == 3 and "refused gpujob's key" in err and "ssh-ed25519 SHA256:" in err, err
    assert f"gpujob host add box --ssh \"ssh -p {sshd.port} {USER}@127.0.0.1\" --force" in err, err
    assert "ssh-agent" not in err, err
    with ssh_agent(tmp_path, _keygen(tmp_path / "id_mine", "ed25519")) as env:  # offered after gpujob's key
        r = run_cli("exec", "box", "--", "true", env_extra=env)
        err = _clear(r)
        assert r.returncode == 3 and "refused gpujob's key" in err and "and the 1 key(s) your ssh-agent holds" in err, err


@pytest.mark.parametrize("sshd", [{"extra": e} for e in SECOND_FACTOR], indirect=True, ids=["kbdint", "password"])
def test_a_second_factor_asked_after_the_key_is_said_as_such(sshd: Sshd) -> None:
    sshd.authorize(public_key_line())
    asked = "keyboard-interactive" if "keyboard" in (sshd.dir / "sshd_config").read_text() else "password"
    r = run_cli("host", "add", "box", "--ssh", sshd.ssh_line())  # stdin not a terminal: a password step would say so
    err = _clear(r)
    assert r.returncode == 3 and "accepted gpujob's key" in err and f"asks for a second factor ({asked})" in err, err
    assert "refused" not in err and "needs a password" not in err and "nothing was saved" in err, err
    assert "key-only login" in err and "gpujob ssh box" in err, err
    assert not HostStore().all() or "box" not in {h.name for h in HostStore().all()}

    _profile(sshd)
    t = time.monotonic()
    r = run_cli("exec", "box", "--", "echo never", env_extra={"GPUJOB_CONNECT_RETRIES": "3"})
    err = _clear(r)  # the host's policy: said at once, no retry, never a prompt on the terminal
    assert r.returncode == 3 and r.stdout == "" and "second factor" in err and "refused" not in err, err
    assert time.monotonic() - t < 20, "retried a refusal that no retry changes"


@pytest.mark.parametrize("sshd", [{"extra": "AuthenticationMethods password\nPasswordAuthentication yes"}],
                         indirect=True)
def test_a_host_that_takes_no_key_login_is_said_as_such(sshd: Sshd) -> None:
    sshd.authorize(public_key_line())
    _profile(sshd)
    r = run_cli("exec", "box", "--", "true")
    err = _clear(r)
    assert r.returncode == 3 and "takes no key login" in err and "offers only password" in err, err
    assert "PubkeyAuthentication yes" in err and "refused gpujob's key" not in err, err


@pytest.mark.parametrize("sshd", [{"extra": "KexAlgorithms sntrup761x25519-sha512@openssh.com"},
                                  {"extra": "Ciphers chacha20-poly1305@openssh.com"},
                                  {"extra": "Ciphers aes128-ctr\nMACs umac-128-etm@openssh.com"}],
                         indirect=True, ids=["kex", "cipher", "mac"])
def test_a_policy_gpujob_does_not_meet_is_the_servers(sshd: Sshd) -> None:
    sshd.authorize(public_key_line())
    _profile(sshd)
    r = run_cli("exec", "box", "--", "true", env_extra={"GPUJOB_CONNECT_RETRIES": "3"})
    err = _clear(r)
    cfg = (sshd.dir / "sshd_config").read_text()
    what, keyword = (("key exchange algorithm", "KexAlgorithms") if "Kex" in cfg else ("MAC", "MACs") if "MACs" in cfg
                     else ("cipher", "Ciphers"))
    assert r.returncode == 3 and f"share no {what}" in err and f"({keyword} " in err, err


def test_a_key_behind_a_passphrase_with_no_agent_says_so(sshd: Sshd, tmp_path: Path) -> None:
    key = _keygen(tmp_path / "id_locked", "rsa", passphrase="correct horse")
    sshd.authorize(key.with_name("id_locked.pub").read_text())
    _profile(sshd, identity=key)
    r = run_cli("exec", "box", "--", "true")
    err = _clear(r)
    assert r.returncode == 3 and "protected by a passphrase" in err and f"ssh-add {key}" in err, err


@contextlib.contextmanager
def ssh_agent(tmp_path: Path, key: Path) -> Iterator[dict[str, str]]:
    """A real ssh-agent holding ``key``; the environment that lets gpujob use it."""
    from tests.helpers import wait_for

    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        wait_for(sock.exists, 10, "the ssh-agent's socket")
        env = {"SSH_AUTH_SOCK": str(sock), "GPUJOB_NO_SSH_AGENT": ""}
        subprocess.run(["ssh-add", "-q", str(key)], env=dict(os.environ, **env), check=True, capture_output=True)
        yield env
    finally:
        agent.terminate()
        agent.wait(10)


def test_a_host_added_through_the_ssh_agent_gets_gpujobs_own_key(tmp_path: Path) -> None:
    """``host add`` without --identity, the user's ssh-agent key taken: the profile gets its own key installed
    (over that login), so it works without the agent and a later refusal of "gpujob's key" is what it says."""
    from gpujob.config.keys import host_key_path
    from tests.conftest import start_sshd, stop_sshd

    home = tmp_path / "home"  # the sessions' HOME: the install writes its ~/.ssh/authorized_keys, which sshd reads
    base = tmp_path / "sshd-home"
    sshd = start_sshd(base, set_env={"HOME": str(home)},
                      extra=f"AuthorizedKeysFile {base / 'authorized_keys'} {home}/.ssh/authorized_keys")
    try:
        mine = _keygen(tmp_path / "id_mine", "ed25519")
        sshd.authorize(mine.with_name("id_mine.pub").read_text())
        with ssh_agent(tmp_path, mine) as env:
            r = run_cli("host", "add", "box", "--ssh", sshd.ssh_line(), "--root", str(tmp_path / "r"), env_extra=env)
            assert r.returncode == 0, r.stderr
        installed = (home / ".ssh" / "authorized_keys").read_text()
        assert host_key_path("box").exists() and "gpujob-box" in installed, installed
        r = run_cli("exec", "box", "--", "true")  # no agent now: gpujob's own key opens it
        assert r.returncode == 0, r.stderr
    finally:
        stop_sshd(sshd)
