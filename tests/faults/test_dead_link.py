"""A command over the kept connection when the link has died fails as a direct one does: the
same message, in the same few seconds (it used to hang for the 600 s of its timeout)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Sshd, run_cli
from tests.faults.linkproxy import LinkProxy


@pytest.fixture
def proxied(ssh_host: str, sshd: Sshd, tmp_path: Path) -> Iterator[tuple[str, LinkProxy]]:
    """Host ``via``: the test sshd reached through a link proxy."""
    from gpujob.hosts import HostStore

    proxy = LinkProxy(sshd.port)
    store = HostStore()
    h = store.get(ssh_host)
    h.name, h.port = "via", proxy.port
    store.save(h)
    yield "via", proxy
    proxy.close()


def test_a_frozen_link_fails_a_kept_connection_command_like_a_direct_one(proxied: tuple[str, LinkProxy]) -> None:
    host, proxy = proxied
    assert run_cli("ls", "--host", host).returncode == 0  # the kept connection is up
    assert run_cli("ls", "--host", host).returncode == 0
    proxy.freeze()
    direct = run_cli("ls", "--host", host, env_extra={"GPUJOB_MUX": "0"}, timeout=120)
    assert direct.returncode != 0 and "Traceback" not in direct.stderr
    kept = run_cli("ls", "--host", host, timeout=120)  # a hang here is the bug
    assert kept.returncode == direct.returncode
    assert kept.stderr == direct.stderr, (kept.stderr, direct.stderr)
    proxy.resume()
    assert run_cli("ls", "--host", host).returncode == 0  # and it comes back by itself


def test_a_frozen_link_during_status_after_activity(proxied: tuple[str, LinkProxy]) -> None:
    """Right after a command (no quiet spell for the daemon's ping probe to notice), a status
    over the frozen link fails instead of waiting."""
    host, proxy = proxied
    assert run_cli("ls", "--host", host).returncode == 0
    proxy.freeze()
    r = run_cli("ls", "--host", host, "--json", timeout=120)
    assert r.returncode != 0 and "127.0.0.1" in (r.stderr + r.stdout) and "Traceback" not in r.stderr
    assert os.environ.get("GPUJOB_MUX", "1") != "0"
