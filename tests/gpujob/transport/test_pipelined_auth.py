"""A key login goes one round trip shorter (issue 38): the signed publickey request follows the
``ssh-userauth`` service request without waiting for sshd's accept. Counted at a proxy with a
far link's delay between gpujob and a real sshd: the turns in which the laptop speaks before the
login is done, pipelined against ``GPUJOB_SSH_PIPELINE_AUTH=0`` (paramiko's own order)."""

from __future__ import annotations

import itertools
import os
from dataclasses import replace

import pytest

from gpujob.config.keys import known_hosts_path, public_key_line
from gpujob.config.paths import config_dir
from gpujob.transport import Endpoint
from gpujob.transport.ssh import open_client
from tests.conftest import Sshd
from tests.faults.linkproxy import LinkProxy


def _login_turns(ep: Endpoint, sshd: Sshd) -> int:
    """How many times the laptop spoke after hearing from sshd, until the login was done."""
    proxy = LinkProxy(sshd.port, latency=0.03)  # each reply comes 60 ms after its request
    try:
        client = open_client(replace(ep, port=proxy.port), retries=1)
        tr = client.get_transport()
        assert tr is not None and tr.is_authenticated()
        turns = sum(1 for up, _ in itertools.groupby(d for d, _ in proxy.chunks) if up)
        _, out, _ = client.exec_command("echo logged-in")  # the connection works on after the login
        assert out.read() == b"logged-in\n"
        client.close()
        return turns
    finally:
        proxy.close()


def test_a_key_login_takes_one_round_trip_less(sshd: Sshd, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    sshd.authorize(public_key_line())
    ep = Endpoint(name="far", hostname="127.0.0.1", port=sshd.port, user=os.environ.get("USER", "root"),
                  root=str(tmp_path / "root"), client_key=str(config_dir() / "id_ed25519"),
                  known_hosts=str(known_hosts_path()), connect_timeout=10)
    open_client(ep, retries=1).close()  # the host key recorded first: both logins below see it known
    # the fewest of three each: on a loaded machine the version lines and the key exchange's first
    # packets can cross at the proxy in another order, which only adds turns, to either login
    pipelined = min(_login_turns(ep, sshd) for _ in range(3))
    monkeypatch.setenv("GPUJOB_SSH_PIPELINE_AUTH", "0")
    plain = min(_login_turns(ep, sshd) for _ in range(3))
    assert pipelined == plain - 1, (pipelined, plain)
