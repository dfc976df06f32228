"""``gpujob host rekey`` (issue 25 leftover): a profile made before per-profile keys logs in with
gpujob's shared key, authorized on every instance; rekey moves it to a key of its own and takes
the shared key's line (that line only) off the host, verified by logging in with each key alone.
The instance is the test's real sshd; its authorized_keys file is the one sshd reads."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, Sshd, free_port, run_cli

# the agent's interpreter as recorded, failing the fresh login's removal as a broken agent would (the one
# failure of that step a real sshd cannot be made to give here); every other verb runs the real agent
FAILING = r'''#!{python}
import json, subprocess, sys
data = sys.stdin.buffer.read() if "authkeys" in sys.argv else None
if data is not None and b'"keep"' in data:
    print(json.dumps({{"error": "agent error in authkeys: disk I/O error", "remedy": "", "code": "agent_error"}}))
    sys.exit(4)
sys.exit(subprocess.run([{real!r}] + sys.argv[1:], input=data).returncode if data is not None
         else subprocess.call([{real!r}] + sys.argv[1:]))
'''
OTHER = 'from="10.0.0.1",no-pty ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOtherOtherOtherOtherOtherOtherOtherOth someone@laptop'


def _opens(name: str, key: Path) -> bool:

    from gpujob.config.hosts import HostStore
    from gpujob.usecases.hosts.rekey import _opens as opens

    return opens(HostStore().get(name), key) if key.exists() else False


@pytest.mark.slow  # ~18 s: three logins per rekey, two rekeys, doctor
def test_rekey_moves_an_old_profile_off_the_shared_key(ssh_host: str, sshd: Sshd, tmp_path: Path) -> None:
    from gpujob.config import keys
    from gpujob.config.hosts import Host, HostStore

    # the file as a user's instance holds it: their own lines around gpujob's shared one, no final newline
    shared_line = keys.public_key_line()
    sshd.authorized_keys.write_text(f"# added by hand\n{OTHER}\n{shared_line}\n\nssh-rsa AAAAB3Nza notakey")
    before = sshd.authorized_keys.read_text()
    home_keys = Path.home() / ".ssh" / "authorized_keys"  # this machine's own: never the one changed
    home_before = home_keys.read_bytes() if home_keys.exists() else None
    HostStore().save(Host(name="gone", hostname="127.0.0.1", port=free_port(), connect_timeout=3))  # nothing listens
    HostStore().save(Host(name="mine", hostname="127.0.0.1", port=sshd.port, identity_file=str(keys.key_path())))

    r = run_cli("host", "ls")
    assert r.returncode == 0 and "box, gone still log(s) in with gpujob's shared key" in r.stderr, r.stderr
    assert "gpujob host rekey --all" in r.stderr
    shared = {d["name"] for d in json.loads(run_cli("host", "ls", "--json").stdout) if d.get("shared_key")}
    assert shared == {"box", "gone"}  # not `mine`: its key is the user's choice (--identity)
    r = run_cli("doctor", "box")
    assert "gpujob host rekey box" in r.stdout + r.stderr, r.stdout + r.stderr

    r = run_cli("host", "rekey", "mine")
    assert r.returncode == 2 and "your own key" in r.stderr and "Traceback" not in r.stderr, r.stderr

    # the new key's step fails on the host: its line is taken off again, the profile keeps its key
    [version] = [p for p in (tmp_path / "remote-root" / "agent").iterdir() if (p / "ok").exists()]
    real = (version / "python").read_text().strip()
    (tmp_path / "failing-agent").write_text(FAILING.format(python=sys.executable, real=real))
    (tmp_path / "failing-agent").chmod(0o755)
    (version / "python").write_text(f"{tmp_path / 'failing-agent'}\n")
    r = run_cli("host", "rekey", "box")
    assert r.returncode == 2 and "disk I/O error; the rekey of box stopped before its profile changed: the new key's " \
        "line was taken off again, the host is as it was" in r.stderr, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and sshd.authorized_keys.read_text() == before
    assert not keys.host_key_path("box").exists() and not keys.pending_key_path("box").exists()
    (version / "python").write_text(f"{real}\n")

    # a second profile of the same login: the shared line stays until it too has its own key
    HostStore().save(Host(name="box2", hostname="127.0.0.1", port=sshd.port, user=HostStore().get("box").user,
                          root=HostStore().get("box").root, connect_timeout=5))
    from gpujob.usecases.hosts.shell import BEGIN, END

    home = tmp_path / "home"  # the user's ~/.ssh/config with gpujob's block (`gpujob ssh` wrote it)
    (home / ".ssh").mkdir(parents=True)
    mine = "Host work\n    User me\n"
    (home / ".ssh" / "config").write_text(f"{mine}\n{BEGIN}\nHost gpujob-box\n    IdentityFile stale\n{END}\n")
    r = run_cli("host", "rekey", "--all", "--json", env_extra={"GPUJOB_MUX": "0", "HOME": str(home)})
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    done = {d["host"]: d for d in json.loads(r.stdout)}
    assert "error" in done["gone"] and "refused the connection" in done["gone"]["error"], done
    assert not keys.host_key_path("gone").exists() and not keys.pending_key_path("gone").exists()
    box, box2 = done["box"], done["box2"]
    assert "error" not in box and "error" not in box2, done
    assert box["was"] == "shared" and box["kept_for"] == ["box2"] and box["removed_lines"] == 0, box
    assert box["old_key_refused"] is None and box["file"] == str(sshd.authorized_keys), box
    assert box2["removed_lines"] == 1 and box2["old_key_refused"] is True and box2["kept_for"] == [], box2

    own, own2 = keys.host_key_path("box"), keys.host_key_path("box2")
    assert own.exists() and own2.exists() and not keys.pending_key_path("box").exists()
    assert HostStore().get("box").endpoint().client_key == str(own)
    lines = [keys.pub_path(k).read_text().strip() for k in (own2, own)]
    after = sshd.authorized_keys.read_text()
    # only the shared key's line went; every other byte stayed, the new lines came where it was
    assert after == before.replace(f"{shared_line}\n", "".join(f"{x}\n" for x in lines)), (before, after)
    assert not _opens("box", keys.key_path()) and _opens("box", own) and _opens("box2", own2)
    assert (home_keys.read_bytes() if home_keys.exists() else None) == home_before
    config = (home / ".ssh" / "config").read_text()  # `ssh gpujob-box` offers the new key; the user's lines stay
    assert config.startswith(mine) and f"IdentityFile {own}\n" in config and "stale" not in config, config
    assert box["ssh_config"] == str(home / ".ssh" / "config")
    r = run_cli("ls", "--host", "box")
    assert r.returncode == 0, r.stderr
    r = run_cli("host", "ls")
    assert "box" not in r.stderr.partition("shared key")[0], r.stderr  # only `gone` is left to rekey

    # a second rekey rotates the profile's own key: the previous one stops opening the host
    previous = own.read_bytes()
    r = run_cli("host", "rekey", "box")
    assert r.returncode == 0 and "its previous key: 1 line(s) removed" in r.stdout, (r.stdout, r.stderr)
    assert own.read_bytes() != previous and _opens("box", own)
    assert sshd.authorized_keys.read_text().count("gpujob-box\n") == 1


def test_authkeys_finds_the_files_sshd_reads_and_keeps_every_other_byte(tmp_path: Path) -> None:
    """The agent's side on its own: AuthorizedKeysFile through an Include, tokens, and a refusal to lock out."""
    import os

    from remote.core.errors import AgentError
    from remote.host import authkeys

    inc = tmp_path / "conf.d"
    inc.mkdir()
    (inc / "10-keys.conf").write_text(f"AuthorizedKeysFile {tmp_path}/%u.keys %h/.ssh/none_here\n")
    cfg = tmp_path / "sshd_config"
    cfg.write_text(f"# a comment\nPort 22\nInclude {inc}/*.conf\nAuthorizedKeysFile ignored\nMatch User x\n")
    me = __import__("pwd").getpwuid(os.getuid())
    files = authkeys.key_files(str(cfg))
    assert files == [f"{tmp_path}/{me.pw_name}.keys", os.path.join(me.pw_dir, ".ssh/none_here")]
    first = Path(files[0])
    first.write_bytes(b"ssh-ed25519 OLD gpujob\r\ncommand=\"x\" ssh-ed25519 OTHER me")  # CRLF, no final newline
    first.chmod(0o640)
    req = {"add": "ssh-ed25519 NEW gpujob-box", "near": ["OLD"]}
    done = authkeys.change(req, str(cfg))
    assert done["added"] == str(first) and first.read_bytes().startswith(b"ssh-ed25519 OLD gpujob\r\nssh-ed25519 NEW")
    with pytest.raises(AgentError, match="leave none"):
        authkeys.change({"remove": ["NEW"], "keep": "NEW"}, str(cfg))
    authkeys.change({"remove": ["NEW"]}, str(cfg))  # an undo gives back the very bytes
    assert first.read_bytes() == b"ssh-ed25519 OLD gpujob\r\ncommand=\"x\" ssh-ed25519 OTHER me"
    assert oct(first.stat().st_mode & 0o777) == "0o640"
    authkeys.change(req, str(cfg))
    assert authkeys.change({"remove": ["OLD"], "keep": "NEW"}, str(cfg))["removed"] == {str(first): 1}
    assert first.read_bytes() == b"ssh-ed25519 NEW gpujob-box\ncommand=\"x\" ssh-ed25519 OTHER me"
    # an undo of a cut rekey takes the new line off only while the old key's line is there: not now
    done = authkeys.change({"remove": ["NEW"], "while_held": "OLD"}, str(cfg))
    assert done["held_back"] is True and done["removed"] == {}
    assert first.read_bytes() == b"ssh-ed25519 NEW gpujob-box\ncommand=\"x\" ssh-ed25519 OTHER me"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".gpujob-authkeys.")]


def _interruptions() -> list[tuple[str, str]]:
    """Every point of a rekey where a Ctrl-C can land: before it, entering and leaving each step, and in
    the two steps that edit the host's file: while the host edits it (the request sent) and once its
    answer is back (the issue's case: the old line gone, the laptop not yet told)."""
    from gpujob.usecases.hosts import rekey

    mod = "gpujob.usecases.hosts.rekey"
    points = [("call", f"{mod}:rekey_host")]
    for step in rekey.STEPS:
        points += [("call", f"{mod}:_step_{step}"), ("return", f"{mod}:_step_{step}")]
        if step in ("add", "remove"):
            points += [("return", f"paramiko.channel:shutdown_write@{mod}:_step_{step}"),
                       ("call", f"gpujob.transport.agent:_parse@{mod}:_step_{step}")]
    return points


@pytest.mark.slow  # ~10 s a point: a cut rekey, logins to check it, a second rekey
@pytest.mark.parametrize("event,where", _interruptions())
def test_a_rekey_interrupted_at_any_point_never_locks_the_user_out(ssh_host: str, sshd: Sshd, tmp_path: Path,
                                                                    event: str, where: str) -> None:
    """issue 34: Ctrl-C at the moment the old key's line was removed left no gpujob key on the host
    (the cut call's undo took the new line off too) and exited 130 in silence. Now at every point:
    one line says the state reached and what next, the profile's key logs in, a second rekey completes."""
    import os
    import subprocess

    from gpujob.config import keys
    from tests.conftest import REPO

    marker = tmp_path / "sigint-sent"
    r = subprocess.run([sys.executable, "-m", "tests.faults.sigint_at", event, where, str(marker), "--",
                        "host", "rekey", "box"], capture_output=True, text=True, timeout=180, cwd=str(REPO),
                       env=dict(os.environ, PYTHONPATH=str(REPO)), stdin=subprocess.DEVNULL)
    assert marker.exists(), f"the SIGINT point was never reached: {r.stderr}"
    assert r.returncode == 130 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert "interrupted: " in r.stderr and "rekey" in r.stderr and "→" in r.stderr, r.stderr  # the state, the next step
    assert _opens("box", keys.client_key_for("box")), (r.stderr, sshd.authorized_keys.read_text())
    assert not list(sshd.authorized_keys.parent.glob(".gpujob-authkeys.*"))  # no temporary file left on the host
    r = run_cli("host", "rekey", "box")
    assert r.returncode == 0, (r.stdout, r.stderr)
    own = keys.host_key_path("box")
    assert _opens("box", own) and not _opens("box", keys.key_path()), sshd.authorized_keys.read_text()
    assert not keys.pending_key_path("box").exists()
    assert sshd.authorized_keys.read_text().count("gpujob-box\n") == 1, sshd.authorized_keys.read_text()



# the agent's interpreter as recorded: the removal runs for real, then its answer never comes back
# (the link dies on its way: the test cuts it) until the test lets the process end
SILENT = r'''#!{python}
import os, subprocess, sys, time
data = sys.stdin.buffer.read() if "authkeys" in sys.argv else None
if data is not None and b'"keep"' in data:
    subprocess.run([{real!r}] + sys.argv[1:], input=data, stdout=subprocess.DEVNULL)
    while not os.path.exists({release!r}):
        time.sleep(0.05)
    sys.exit(0)
sys.exit(subprocess.run([{real!r}] + sys.argv[1:], input=data).returncode if data is not None
         else subprocess.call([{real!r}] + sys.argv[1:]))
'''


@pytest.mark.slow  # ~20 s: a cut rekey, logins to check it, a second rekey
def test_a_rekey_whose_link_is_cut_after_the_host_removed_the_old_key_keeps_a_way_in(
        ssh_host: str, sshd: Sshd, tmp_path: Path) -> None:
    """The link dies once the host has taken the old key's line off, before its answer is back: the
    undo over the old login must not take the new line off (no key left: it did). Each key alone is
    tried instead; the new one opens the host, so the profile takes it."""
    from gpujob.config import keys
    from gpujob.config.hosts import HostStore
    from tests.faults.linkproxy import LinkProxy
    from tests.helpers import wait_for

    assert run_cli("ls", "--host", "box").returncode == 0  # the agent installed
    [version] = [p for p in (tmp_path / "remote-root" / "agent").iterdir() if (p / "ok").exists()]
    real = (version / "python").read_text().strip()
    release = tmp_path / "release"
    (tmp_path / "silent-agent").write_text(SILENT.format(python=sys.executable, real=real, release=str(release)))
    (tmp_path / "silent-agent").chmod(0o755)
    (version / "python").write_text(f"{tmp_path / 'silent-agent'}\n")
    link = LinkProxy(sshd.port)
    store = HostStore()
    host = store.get("box")
    host.port = link.port
    store.save(host)
    shared_line = keys.public_key_line()
    p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "host", "rekey", "box"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(REPO), GPUJOB_MUX="0"))
    try:
        wait_for(lambda: shared_line not in sshd.authorized_keys.read_text() or p.poll() is not None, 120,
                 "the host removing the old line")
        link.cut()
        link.resume()
        out, err = p.communicate(timeout=180)
    finally:
        release.touch()
        if p.poll() is None:
            p.kill()
        link.close()
    (version / "python").write_text(f"{real}\n")
    store.save(dataclasses.replace(store.get("box"), port=sshd.port))
    assert p.returncode == 3 and "Traceback" not in err, (p.returncode, err)
    assert "the profile now logs in with its new key" in err, err
    assert keys.host_key_path("box").exists() and _opens("box", keys.client_key_for("box")), err
    r = run_cli("host", "rekey", "box")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert sshd.authorized_keys.read_text().count("gpujob-box\n") == 1, sshd.authorized_keys.read_text()
