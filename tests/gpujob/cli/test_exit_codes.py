"""Exit codes a script can use: a followed job exits with its outcome, ``status --exit-code``
too, and usage errors stay distinct from connection failures and job outcomes."""

from __future__ import annotations

import json
from pathlib import Path

from gpujob import exitcodes
from tests.conftest import free_port, run_cli
from tests.helpers import wait_state


def job_file(tmp_path: Path, name: str, run: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "job.yaml").write_text(json.dumps({"name": name, "run": run, "retry": {"max_restarts": 0}}))
    return d / "job.yaml"


def test_followed_jobs_exit_with_their_outcome(tmp_path: Path) -> None:
    ok = run_cli("submit", str(job_file(tmp_path, "fine", "echo fine")), "--follow")
    assert ok.returncode == exitcodes.SUCCEEDED, ok.stderr
    bad = run_cli("submit", str(job_file(tmp_path, "bad", "echo bad; exit 3")), "--follow")
    assert bad.returncode == exitcodes.FAILED and "bad" in bad.stdout, bad.stderr
    assert run_cli("tail", "bad", "-f").returncode == exitcodes.FAILED
    assert run_cli("tail", "bad").returncode == 0  # without -f: the log was printed, nothing more
    assert run_cli("status", "bad", "--exit-code").returncode == exitcodes.FAILED
    assert run_cli("status", "fine", "--exit-code", "--json").returncode == exitcodes.SUCCEEDED

    r = run_cli("submit", str(job_file(tmp_path, "long", "sleep 300")), "--json")
    job_id = json.loads(r.stdout)["job_id"]
    wait_state("local", job_id, ("running",))
    assert run_cli("status", job_id, "--exit-code").returncode == exitcodes.NOT_FINISHED
    assert run_cli("stop", job_id).returncode == 0
    assert run_cli("tail", job_id, "-f").returncode == exitcodes.STOPPED
    assert run_cli("status", job_id, "--exit-code").returncode == exitcodes.STOPPED


def test_usage_and_connection_errors_differ() -> None:
    r = run_cli("status", "--no-such-option")
    assert r.returncode == exitcodes.USAGE
    r = run_cli("status", "nosuchjob-xyz", "--exit-code")
    assert r.returncode == exitcodes.USAGE and "Traceback" not in r.stderr
    r = run_cli("host", "add", "gone", "--ssh", f"ssh -p {free_port()} root@127.0.0.1")
    assert r.returncode == exitcodes.CONNECT
