"""``gpujob gc`` while a submit of an old, unused project is still uploading (its link frozen
mid-stream): gc leaves the project alone, since removing its code under the upload (or under the
snapshot that follows) would start the job on a partial tree; the submit then completes whole."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import run_cli
from tests.faults.linkproxy import LinkProxy
from tests.faults.test_link import cli, via  # noqa: F401  (the fixture)
from tests.helpers import wait_for, wait_state, write_job


def test_gc_leaves_a_project_that_is_syncing(via: tuple[str, LinkProxy], ssh_host: str,  # noqa: F811
                                             tmp_path: Path) -> None:
    host, proxy = via
    job = write_job(tmp_path, "gcrace", "print(len(open('data.bin', 'rb').read()), flush=True)", "python main.py")
    (job.parent / "data.bin").write_bytes(os.urandom(24 << 20))
    project = tmp_path / "remote-root" / "projects" / "gcrace"
    p = cli("submit", str(job), "--host", host, "--json")
    try:
        wait_for(lambda: (project / "sync.lease").exists() and proxy.bytes > 4 << 20, 60, "the upload to start")
        proxy.freeze()
        r = run_cli("gc", ssh_host, "--older-than", "0s", "--json")  # the same root, not through the frozen link
        assert r.returncode == 0, r.stderr
        assert (project / "sync.lease").exists(), json.loads(r.stdout)
        proxy.resume()
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    assert p.returncode == 0, err
    job_id = json.loads(out)["job_id"]
    st = wait_state(ssh_host, job_id, ("succeeded", "failed"), 60)
    assert st["state"] == "succeeded", st
    assert str(24 << 20) in (tmp_path / "remote-root" / "jobs" / job_id / "output.log").read_text()
