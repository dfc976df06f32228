"""Events the agent sends (started, restarted, failed, autostopped, lost) to a real HTTP server,
and the power-off that waits for the last notification."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import submit, wait_for, wait_state

SECRET = "whsec-9f3a1c7e5b2d4f60"
TOKEN = "tok8c41d2e9a7b3f5016"


class Hook:
    """Records each POST (receive time, path, headers, JSON body); can fail or stall on demand."""

    def __init__(self) -> None:
        self.got: list[dict] = []
        self.fail_first: set[str] = set()  # event names answered 500 once
        self.delay = 0.0
        rec = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                t = time.time()
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw)
                ev = body.get("event")
                fail = ev in rec.fail_first
                rec.fail_first.discard(ev)
                time.sleep(rec.delay)
                rec.got.append({"t": t, "path": self.path, "headers": dict(self.headers), "raw": raw, "body": body,
                                "status": 500 if fail else 200, "answered": time.time()})
                self.send_response(500 if fail else 200)
                self.end_headers()
                self.wfile.write(b"no" if fail else b"ok")

            def log_message(self, *a: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/{TOKEN}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[str]:
        return [g["body"]["event"] for g in self.got if g["status"] == 200]

    def wait_for(self, ev: str, timeout: float = 120) -> dict:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for g in self.got:
                if g["body"].get("event") == ev and g["status"] == 200:
                    return g
            time.sleep(0.2)
        raise AssertionError(f"no {ev!r} notification; got {self.events()}")


def job_dir(tmp_path: Path, name: str, script: str, spec: dict) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "main.py").write_text(script)
    (d / "job.yaml").write_text(json.dumps({"name": name, "run": "python main.py", **spec}))
    return d / "job.yaml"


def notify_cfg(hook: Hook, on: list[str]) -> dict:
    # literal secrets in the job file: they must travel in the secrets file, not spec.json
    return {"on": on, "channels": [{"type": "webhook", "url": hook.url, "secret": SECRET}]}


def check_signature(g: dict) -> None:
    want = "sha256=" + hmac.new(SECRET.encode(), g["raw"], hashlib.sha256).hexdigest()
    assert g["headers"]["X-Gpujob-Signature"] == want


FAILING = r'''
import json, os, sys
with open(os.environ["GPUJOB_METRICS_FILE"], "a") as m:
    m.write(json.dumps({"step": 7, "loss": 0.25}) + "\n")
for i in range(30):
    print("line", i)
raise RuntimeError("boom in attempt " + os.environ["GPUJOB_ATTEMPT"])
'''


def test_started_restarted_failed_with_diagnosis_and_tail(hook: Hook, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AutoDLService6006URL", "https://u123-tb.westb.seetacloud.com:8443")
    job = job_dir(tmp_path, "fails", FAILING, {
        "retry": {"max_restarts": 1, "backoff": "0s"},
        "notify": notify_cfg(hook, ["started", "restarted", "failed", "succeeded"]),
    })
    job_id = submit("local", job)["job_id"]
    failed = hook.wait_for("failed")
    assert hook.events() == ["started", "restarted", "failed"]
    for g in hook.got:
        check_signature(g)
        assert g["path"] == f"/hook/{TOKEN}"
    b = failed["body"]
    assert b["job_id"] == job_id and b["name"] == "fails" and b["host"] == "local" and b["attempt"] == 2
    assert b["duration_s"] is not None and b["metrics"] == {"step": 7, "loss": 0.25}
    assert b["tb_url"] == "https://u123-tb.westb.seetacloud.com:8443"
    assert "RuntimeError: boom in attempt 2" in "\n".join(b["log_tail"]) and len(b["log_tail"]) == 20
    assert b["diagnosis"] and "Diagnosis:" in b["text"] and "TensorBoard: https://u123-tb" in b["text"]
    assert "Metrics: step=7, loss=0.25" in b["text"]
    restarted = hook.wait_for("restarted")["body"]
    assert restarted["reason"]
    spec_text = (Path(os.environ["GPUJOB_LOCAL_ROOT"]) / "jobs" / job_id / "spec.json").read_text()
    assert SECRET not in spec_text and TOKEN not in spec_text and "${GPUJOB_NOTIFY_0_URL}" in spec_text


LOOP = r'''
import os, sys, time
stop = os.environ["GPUJOB_STOP_FILE"]
open(stop + ".watch", "w").close()
while not os.path.exists(stop):
    print("working", flush=True); time.sleep(0.2)
time.sleep(0.5)
os.makedirs(os.environ["GPUJOB_CKPT_DIR"] + "/final", exist_ok=True)
print("final checkpoint written", flush=True)
'''


def test_shutdown_runs_after_checkpoint_and_last_notification(hook: Hook, ssh_host: str, tmp_path: Path) -> None:
    log = tmp_path / "shutdown.log"
    stand_in = tmp_path / "fake-shutdown"
    stand_in.write_text(f'#!/bin/sh\necho "$(date +%s.%N) shutdown $*" >> {log}\n')
    stand_in.chmod(0o755)
    r = run_cli("host", "set", ssh_host, "--shutdown-command", f"{stand_in} -h now", "--price", "36")
    assert r.returncode == 0, r.stderr
    hook.fail_first = {"autostopped"}  # the first try gets a 500: the retry must be waited for
    hook.delay = 0.7
    job = job_dir(tmp_path, "capped", LOOP, {
        "autostop": {"max_runtime": "2s", "check_every": "1s", "after": "shutdown"},
        "notify": notify_cfg(hook, ["autostopped"]),
    })
    job_id = submit(ssh_host, job)["job_id"]
    deadline = time.time() + 60
    while time.time() < deadline and not log.exists():
        time.sleep(0.2)
    assert log.exists(), "the shutdown command never ran"
    shut_at = float(log.read_text().split()[0])
    assert "shutdown -h now" in log.read_text()
    tries = [g for g in hook.got if g["body"]["event"] == "autostopped"]
    assert [g["status"] for g in tries] == [500, 200]
    assert shut_at > tries[-1]["answered"], (shut_at, tries[-1]["answered"])
    b = tries[-1]["body"]
    assert b["reason"].startswith("autostop: max_runtime") and b["cost"] > 0 and b["currency"] == "CNY"
    st = json.loads(run_cli("status", job_id, "--host", ssh_host, "--json").stdout)
    assert st["state"] == "autostopped"
    root = tmp_path / "remote-root" / "jobs" / job_id
    final = (root / "ckpt" / "final").stat().st_mtime
    assert final < shut_at
    assert "final checkpoint written" in (root / "output.log").read_text()


SAVES = r'''
import os
d = os.path.join(os.environ["GPUJOB_CKPT_DIR"], "final")
os.makedirs(d, exist_ok=True)
open(os.path.join(d, "weights.bin"), "wb").write(b"w" * 4096)
print("saved", flush=True)
'''


def test_shutdown_waits_for_gpujob_pull_of_the_finished_job(ssh_host: str, tmp_path: Path) -> None:
    log = tmp_path / "shutdown.log"
    stand_in = tmp_path / "fake-shutdown"
    stand_in.write_text(f'#!/bin/sh\necho "$(date +%s.%N) shutdown $*" >> {log}\n')
    stand_in.chmod(0o755)
    assert run_cli("host", "set", ssh_host, "--shutdown-command", str(stand_in)).returncode == 0
    root = tmp_path / "remote-root"
    # the supervisor's heartbeat, written while it waits for the pull, shows it went on waiting
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.env").write_text("GPUJOB_HEARTBEAT=0.5\n")
    job = job_dir(tmp_path, "keepme", SAVES, {"autostop": {"after": "shutdown", "pull_before_shutdown": "2m"}})
    job_id = submit(ssh_host, job)["job_id"]
    events = root / "jobs" / job_id / "events.jsonl"
    wait_for(lambda: "waiting_for_pull" in (events.read_text() if events.exists() else ""), 60, "waiting_for_pull")
    since = [json.loads(x) for x in events.read_text().splitlines() if '"waiting_for_pull"' in x][0]["t"]

    def beat() -> float:
        try:
            return float(json.loads((root / "jobs" / job_id / "status.json").read_text()).get("heartbeat") or 0)
        except (OSError, ValueError):
            return 0.0

    # beats from the wait for 1.5 s after it began (its marker checked every 0.5 s): no shutdown
    wait_for(lambda: log.exists() or beat() >= since + 1.5, 30, "the supervisor's beats while it waits")
    assert not log.exists()  # the meter runs on until the results are safe on the laptop
    pulled_at = time.time()
    r = run_cli("pull", job_id, str(tmp_path / "got"), "--host", ssh_host, "--json")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "got" / job_id / "ckpt" / "final" / "weights.bin").stat().st_size == 4096
    deadline = time.time() + 30
    while time.time() < deadline and not log.exists():
        time.sleep(0.2)
    assert log.exists(), "the shutdown command never ran after the pull"
    assert float(log.read_text().split()[0]) > pulled_at
    done = [json.loads(x) for x in events.read_text().splitlines() if '"pull_wait_done"' in x]
    assert done and done[0]["pulled"] is True


def _lost_senders(root: Path) -> list[int]:
    """The agent's detached ``notify_lost`` processes for jobs under ``root``."""
    from remote.core.procs import _cmdline, _parents

    want = str(root).encode()
    return [p for p in _parents() if b"notify_lost" in _cmdline(p) and want in _cmdline(p)]


def test_lost_is_announced_once_by_the_agent(hook: Hook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUJOB_STALE_AFTER", "2")
    job = job_dir(tmp_path, "doomed", LOOP, {"notify": notify_cfg(hook, ["lost"])})
    job_id = submit("local", job)["job_id"]
    root = Path(os.environ["GPUJOB_LOCAL_ROOT"]) / "jobs" / job_id
    wait_state("local", job_id, ("running",), 30, root=root.parent.parent)
    st = json.loads((root / "status.json").read_text())
    os.kill(st["supervisor_pid"], signal.SIGKILL)  # the agent dies (OOM killer, a bug)
    os.killpg(st["child_pid"], signal.SIGKILL)
    wait_state("local", job_id, ("lost",), 30)  # each look of this wait is a client too
    for _ in range(2):  # two clients look: one message
        r = run_cli("status", job_id, "--host", "local", "--json")
        assert json.loads(r.stdout)["state"] == "lost"
    g = hook.wait_for("lost", 20)
    assert g["body"]["job_id"] == job_id and "stale heartbeat" in g["body"]["text"]
    # every look started its sender before it answered: once none runs, the count is final
    wait_for(lambda: not _lost_senders(root.parent.parent), 30, "the lost senders to finish")
    assert hook.events().count("lost") == 1


def test_notify_test_command_sends_from_the_laptop(hook: Hook, tmp_path: Path) -> None:
    job = job_dir(tmp_path, "probe", "print('x')\n", {"notify": notify_cfg(hook, ["failed"])})
    r = run_cli("notify", "test", str(job))
    assert r.returncode == 0, r.stderr + r.stdout
    assert "delivered" in r.stdout and SECRET not in r.stdout and TOKEN not in r.stdout
    g = hook.wait_for("test", 5)
    check_signature(g)
    (tmp_path / "none.yaml").write_text("run: echo\n")
    r = run_cli("notify", "test", str(tmp_path / "none.yaml"))
    assert r.returncode != 0 and "no notify channels" in (r.stderr + r.stdout)
    (tmp_path / "unset.yaml").write_text("run: echo\nnotify: [{type: slack, url: '${NOT_SET_FOR_PROBE}'}]\n")
    r = run_cli("notify", "test", str(tmp_path / "unset.yaml"))  # the skip says where the value would come from
    assert r.returncode == 1 and "${NOT_SET_FOR_PROBE} is not set" in r.stdout, r.stdout + r.stderr
    assert "→ export each such NAME" in r.stderr and "secrets.env" in r.stderr
