"""``gpujob host add NAME --ssh "ssh ALIAS"``: the alias is read from the user's ssh_config
(``$HOME/.ssh/config``; each test gets a HOME of its own in its tmp folder)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import Sshd, free_port, run_cli


def _home(tmp_path: Path, config: str) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(config)
    return {"HOME": str(home)}


def test_alias_from_ssh_config(sshd: Sshd, tmp_path: Path) -> None:
    from gpujob.config.keys import public_key_line

    sshd.authorize(public_key_line())
    user = os.environ.get("USER", "root")
    env = _home(tmp_path, f"Host gpubox\n    HostName 127.0.0.1\n    Port {sshd.port}\n    User {user}\n")
    r = run_cli("host", "add", "box", "--ssh", "ssh gpubox", "--root", str(tmp_path / "rr"), env_extra=env)
    assert r.returncode == 0, r.stderr
    from gpujob.config.hosts import HostStore

    box = HostStore().get("box")
    assert (box.hostname, box.port, box.user) == ("127.0.0.1", sshd.port, user)


def test_alias_under_match_exec_is_refused(tmp_path: Path) -> None:
    ran = tmp_path / "match-exec-ran"
    env = _home(tmp_path, "Host gpubox\n    HostName 127.0.0.1\n    Port 2222\n"
                          f'Match exec "touch {ran}"\n    User other\n')
    r = run_cli("host", "add", "box", "--ssh", "ssh gpubox", env_extra=env)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Match exec" in r.stderr and "gpujob does not run" in r.stderr
    assert 'gpujob host add NAME --ssh "ssh -p PORT user@host"' in r.stderr
    assert "Traceback" not in r.stderr
    assert not ran.exists()  # the line's command was not run
    # an address, not an alias: the file is not consulted (a `Match` block once broke every host add)
    r = run_cli("host", "add", "box", "--ssh", f"ssh -p {free_port()} root@127.0.0.1", env_extra=env)
    assert r.returncode == 3 and "refused the connection" in r.stderr, r.stderr
    assert not ran.exists()
    from gpujob.config.hosts import HostStore

    assert [h.name for h in HostStore().all()] == ["local"]  # nothing saved
