"""Hermetic runs: a failed test leaves no job process behind, and namespaces of a run killed
before its cleanup are reclaimed by the next."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, job_processes_under
from tests.netlab import ip, make_lab, require_root_and_ip


def test_a_failed_test_leaves_no_job_process(tmp_path: Path) -> None:
    report = tmp_path / "inner"
    env = dict(os.environ, GJ_REPORT=str(report), PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'bt'}",
                        "tests/faults/failing_case.py"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 1 and "fails on purpose" in r.stdout, r.stdout[-2000:]
    inner = Path(report.read_text())
    assert (inner / "local-root" / "jobs").is_dir()
    assert job_processes_under(inner) == set()


def test_namespaces_of_a_killed_run_are_reclaimed() -> None:
    require_root_and_ip()
    dead = subprocess.Popen(["true"])
    dead.wait()
    ns, br = f"gjn{dead.pid}x1", f"gjb{dead.pid}x1"
    ip("netns", "add", ns)
    ip("link", "add", br, "type", "bridge")
    lab = make_lab(1)
    try:
        assert ns not in ip("netns", "list").stdout
        assert ip("link", "show", br, check=False).returncode != 0
        assert lab.namespaces[0] in ip("netns", "list").stdout
        out = ip("-n", lab.namespaces[0], "-o", "addr", "show", "gjeth0").stdout
        assert lab.addr(0) in out
    finally:
        lab.close()
    assert lab.namespaces[0] not in ip("netns", "list").stdout
