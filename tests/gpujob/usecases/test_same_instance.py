"""Two host profiles that reach one instance (issue 35): a user who ran `host add` again with the other
login line of the same machine. `host add` says so and names the other profile; `ls`, `cost` and the
dashboard list each job once. Two real sshd processes with one host key serve this one machine."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tests.conftest import Sshd, run_cli, start_sshd, stop_sshd
from tests.helpers import submit, wait_state, write_job


def test_a_second_profile_of_one_instance_is_said_at_add_and_each_job_is_listed_once(sshd: Sshd, tmp_path: Path) -> None:
    from gpujob.config.keys import public_key_line

    other = start_sshd(tmp_path / "sshd-b", host_key=sshd.host_key)  # the same machine on another port
    try:
        for s in (sshd, other):
            s.authorize(public_key_line())
        root = str(tmp_path / "remote-root")
        a = run_cli("host", "add", "a", "--ssh", sshd.ssh_line(), "--root", root, "--preset", "generic")
        assert a.returncode == 0 and "warning" not in a.stderr, a.stderr
        b = run_cli("host", "add", "b", "--ssh", other.ssh_line(), "--root", root, "--preset", "generic")
        assert b.returncode == 0, b.stderr
        assert "same instance as profile a" in b.stderr and "gpujob host set a --ssh" in b.stderr \
            and "gpujob host rm b" in b.stderr, b.stderr
        # another root on the same machine is another gpujob: no warning
        c = run_cli("host", "add", "c", "--ssh", other.ssh_line(), "--root", str(tmp_path / "root-c"), "--preset", "generic")
        assert c.returncode == 0 and "warning" not in c.stderr, c.stderr

        job = write_job(tmp_path, "twice", "print('ran')\n", f"{sys.executable} main.py")
        ids = [submit("a", job)["job_id"], submit("b", job)["job_id"]]
        for jid in ids:
            wait_state("a", jid, ("succeeded",), 90)

        ls = json.loads(run_cli("ls", "--all", "--json").stdout)
        assert sorted(j["job_id"] for j in ls["jobs"]) == sorted(ids), ls
        assert not ls["errors"], ls
        cost = json.loads(run_cli("cost", "--json").stdout)
        assert sorted(j["job_id"] for j in cost["jobs"]) == sorted(ids), cost
        assert sum(h["jobs"] for h in cost["hosts"].values()) == 2, cost

        from gpujob.dashboard.hub import Hub

        hub = Hub(["a", "b"], interval=0.5).start()
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not all(hub.jobs.get(h) for h in ("a", "b")):
                time.sleep(0.2)
            assert all(hub.jobs.get(h) for h in ("a", "b")), hub.errors
            assert sorted(r["job_id"] for r in hub.rows()["jobs"]) == sorted(ids)
        finally:
            hub.close()
    finally:
        stop_sshd(other)
