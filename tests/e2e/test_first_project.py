"""What a new user meets first: a project that is only its job file, a notify list, a stopped
event, and a price set after submit (on ``local`` and over a real sshd)."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

from tests.conftest import run_cli
from tests.helpers import wait_state
from tests.remote.run.test_events import Hook

SECRET = "x-secret-5d0c7a19e3"


def test_a_project_of_only_its_job_file_runs_and_stop_is_announced(any_host: str, hook: Hook, tmp_path: Path) -> None:
    proj = tmp_path / "onlyjob"
    proj.mkdir()
    # the URL is a literal secret (the job file stays home, so the tree sent is empty); `notify:`
    # as a bare list of channels; the signing secret a ${NAME} reference
    (proj / "job.yaml").write_text(
        "name: onlyjob\nrun: echo hi; sleep 300\n"
        f"notify:\n  - {{type: webhook, url: \"{hook.url}\", secret: \"${{X}}\", on: [started, stopped]}}\n")
    r = run_cli("submit", str(proj / "job.yaml"), "--host", any_host, "--json", env_extra={"X": SECRET})
    assert r.returncode == 0, r.stderr + r.stdout
    job_id = json.loads(r.stdout)["job_id"]
    started = hook.wait_for("started")
    want = "sha256=" + hmac.new(SECRET.encode(), started["raw"], hashlib.sha256).hexdigest()
    assert started["headers"]["X-Gpujob-Signature"] == want  # ${X} reached the agent as the secret
    wait_state(any_host, job_id, ("running",))
    if any_host != "local":  # a price set after submit applies to the running job
        st = json.loads(run_cli("status", job_id, "--json").stdout)
        assert st["cost"] is None
        assert run_cli("host", "set", any_host, "--price", "1.98").returncode == 0
        st = json.loads(run_cli("status", job_id, "--json").stdout)
        assert st["cost"] is not None and st["spec"]["price_per_hour"] == 1.98
        doc = json.loads(run_cli("cost", "--json").stdout)
        line = next(j for j in doc["jobs"] if j["job_id"] == job_id)
        assert line["price_per_hour"] == 1.98 and line["cost"] is not None
        assert doc["hosts"][any_host]["unpriced"] == 0
    r = run_cli("stop", job_id, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "stopped", r.stderr + r.stdout
    body = hook.wait_for("stopped")["body"]
    assert body["job_id"] == job_id and body["state"] == "stopped"
    assert "stopped" in body["text"]
    r = run_cli("tail", job_id, "-n", "5")
    assert "hi" in r.stdout.splitlines()


def test_an_empty_tree_is_a_project(tmp_path: Path) -> None:
    proj = tmp_path / "bare"
    proj.mkdir()
    (proj / "job.yaml").write_text("name: bare\nrun: echo hi\nexclude: [job.yaml]\n")
    r = run_cli("submit", str(proj / "job.yaml"), "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    job_id = json.loads(r.stdout)["job_id"]
    assert wait_state("local", job_id, ("succeeded", "failed"))["state"] == "succeeded"


def test_secret_references_are_not_literal_secrets() -> None:
    from gpujob.config.spec import notify_secrets

    refs = {"channels": [{"type": "webhook", "url": "${HOOK_URL}", "secret": "${X}"}]}
    assert notify_secrets(refs)[1] == {}
    literal = {"channels": [{"type": "webhook", "url": "https://example.invalid/h", "secret": "${X}"}]}
    assert list(notify_secrets(literal)[1].values()) == ["https://example.invalid/h"]


def test_notify_mapping_error_suggests_channels(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("name: n\nrun: echo\nnotify: slack\n")
    r = run_cli("submit", str(tmp_path / "job.yaml"))
    assert r.returncode == 2 and "did you mean notify: {channels: [...]}" in r.stderr
    assert "Traceback" not in r.stderr
