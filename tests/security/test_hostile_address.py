"""A power ``address`` command prints what a provider's API answered: it may move the login
(host, port, user), never choose which of the user's keys gpujob offers (``-i``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import run_cli


def test_an_address_line_cannot_pick_the_key(ssh_host: str, sshd: object, tmp_path: Path) -> None:
    from gpujob.config.hosts import HostStore

    other = tmp_path / "work_key"  # another key of the user's, which this host happens to accept
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    sshd.authorize((tmp_path / "work_key.pub").read_text())  # type: ignore[attr-defined]
    flag = tmp_path / "on"
    state = f"{sys.executable} -c \"import os; print('running' if os.path.exists({str(flag)!r}) else 'stopped')\""
    store = HostStore()
    host = store.get(ssh_host)
    host.power = {"on": f"touch {flag}", "state": state,
                  "address": f"echo ssh -i {other} -p {host.port} {os.environ.get('USER', 'root')}@127.0.0.1"}
    store.save(host)
    r = run_cli("host", "on", ssh_host, env_extra={"GPUJOB_POWER_POLL": "0.1"}, timeout=60)
    assert r.returncode == 0, r.stderr
    [prof] = [h for h in json.loads(run_cli("host", "ls", "--json").stdout) if h["name"] == ssh_host]
    assert str(other) not in json.dumps({k: v for k, v in prof.items() if k != "power"}), prof
