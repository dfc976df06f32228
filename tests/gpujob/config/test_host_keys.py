"""Per-profile keys (issue 25 item 3): the password step of ``host add`` gives each profile a key
of its own, so that one instance's ``authorized_keys`` (read by its provider, or by whoever has
it next) unlocks no other instance of the user's.

Two real sshds are the two instances. Password login cannot exist here (the test sshd has no
password to accept), so the one stand-in is the password step's login: it appends the key line
``host add`` hands it to that sshd's authorized_keys, as the real step does on the instance."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import Sshd, run_cli, start_sshd, stop_sshd


def test_each_profile_gets_its_own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpujob.config import keys
    from gpujob.config.hosts import HostStore
    from gpujob.errors import ConnectError
    from gpujob.transport.ssh import open_client
    from gpujob.usecases.hosts import add as hostsetup

    # password logins on, as on a rented instance (host add asks for no password a host without them refuses)
    a, b = (start_sshd(tmp_path / f"sshd-{n}", extra="PasswordAuthentication yes") for n in "ab")
    by_port: dict[int, Sshd] = {a.port: a, b.port: b}
    installed: list[tuple[str, str]] = []

    def password_login_stand_in(host: object, password: str, pub: str) -> None:
        assert password == "pw"
        by_port[host.port].authorize(pub)  # type: ignore[attr-defined]
        installed.append((host.name, pub))  # type: ignore[attr-defined]

    monkeypatch.setattr(hostsetup, "install_key", password_login_stand_in)
    try:
        for name, s in (("a", a), ("b", b)):
            hostsetup.add_host(name, s.ssh_line(), password="pw", preset="generic", root=str(tmp_path / f"root-{name}"))
        ka, kb = keys.host_key_path("a"), keys.host_key_path("b")
        assert ka.exists() and kb.exists() and ka.read_bytes() != kb.read_bytes()
        assert oct(ka.stat().st_mode & 0o777) == "0o600"
        store = HostStore()
        assert store.get("a").endpoint().client_key == str(ka)
        assert [n for n, _ in installed] == ["a", "b"] and installed[0][1] != installed[1][1]
        shared = keys.public_key_line()
        for s in (a, b):  # the shared key is installed nowhere
            assert shared.split()[1] not in s.authorized_keys.read_text()
        # a's key (all that instance a ever saw the public half of) does not open b, nor b's a
        from dataclasses import replace

        for name, key in (("b", ka), ("a", kb)):
            with pytest.raises(ConnectError, match="refused gpujob's key"):
                open_client(replace(store.get(name).endpoint(), client_key=str(key)), retries=1)
        env = {"GPUJOB_MUX": "0"}
        r = run_cli("ls", "--host", "a", "--json", env_extra=env)
        assert r.returncode == 0, r.stderr
        r = run_cli("ssh", "b", "--print", "--json", env_extra=env)
        assert r.returncode == 0 and f"IdentityFile {kb}" in json.loads(r.stdout)["block"], r.stdout
        assert run_cli("host", "rm", "a").returncode == 0
        assert not ka.exists() and kb.exists()
    finally:
        stop_sshd(a)
        stop_sshd(b)
    assert os.environ["GPUJOB_CONFIG_DIR"] in str(ka)
