"""A job reference that matches jobs on several hosts is an error listing them, for every verb:
`status` does not answer for one of them and `rm` removes nothing until `--host` picks one; "no job
matches" names the host searched, and the API raises `JobNotFound` as documented."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpujob.errors import JobAmbiguous, JobNotFound
from tests.conftest import run_cli
from tests.helpers import remote_root, submit, wait_state, write_job


def test_a_reference_on_two_hosts_is_refused_until_host_picks(tmp_path: Path, ssh_host: str) -> None:
    job = write_job(tmp_path, "snap", "print('hi')", "python main.py")
    a = submit("local", job)["job_id"]
    b = submit(ssh_host, job)["job_id"]
    wait_state("local", a, ("succeeded",))
    wait_state(ssh_host, b, ("succeeded",))
    prefix = os.path.commonprefix([a, b])
    every = [["status", "snap"], ["tail", "snap"], ["pull", "snap", str(tmp_path / "p")], ["stop", "snap"], ["rm", "snap"]]
    for verb in every + [["status", prefix], ["rm", prefix]]:  # a name, and an id prefix
        r = run_cli(*verb)
        assert r.returncode == 2, (verb, r.stdout, r.stderr)
        assert "matches jobs on several hosts" in r.stderr and f"{a} on local" in r.stderr \
            and f"{b} on {ssh_host}" in r.stderr and "--host" in r.stderr, (verb, r.stderr)
    assert (tmp_path / "local-root" / "jobs" / a).is_dir() and (remote_root(tmp_path, ssh_host) / "jobs" / b).is_dir()

    r = run_cli("status", "nosuchjob-zz")
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and "no job matches 'nosuchjob-zz' on local" in said, said
    assert f"not looked for on {ssh_host}" in said and "--host HOST searches one" in said, said
    r = run_cli("rm", prefix, "--host", ssh_host)  # --host picks one: that one goes, the other stays
    assert r.returncode == 0, r.stderr
    assert not (remote_root(tmp_path, ssh_host) / "jobs" / b).exists() and (tmp_path / "local-root" / "jobs" / a).is_dir()
    r = run_cli("status", prefix)  # now only one matches: no guess needed
    assert r.returncode == 0 and a in r.stdout, r.stderr


def test_api_raises_job_not_found_and_job_ambiguous(tmp_path: Path) -> None:
    import gpujob
    from gpujob.config import index

    with gpujob.Client() as c, pytest.raises(JobNotFound) as e:
        c.job("nosuchjob-zz").status()
    assert "on local" in e.value.cause
    index.record("twin-0101-aaaaa", "local", "twin")
    index.record("twin-0101-bbbbb", "box", "twin")
    with gpujob.Client() as c, pytest.raises(JobAmbiguous):
        c.job("twin").status()
