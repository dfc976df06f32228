"""No secret value anywhere: remote files, local config, logs, agent log, notifications, ``ps``, CLI output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import Sshd, _descendants, run_cli
from tests.helpers import submit, wait_for, wait_state, write_job
from tests.remote.run.test_events import Hook

HOOK_TOKEN = "hooktok-51e0c9a2b7d4"  # from the secrets file, used as ${HOOK_TOKEN} in the URL
SIGN_KEY = "signkey-3c8e1f70aa92"  # a literal in the job file (moved to the secrets file on submit)
API_KEY = "apikey-7d2b9e4c1f08"  # a job secret (secrets: [MY_API_KEY]) from the environment
SECRETS = [HOOK_TOKEN, SIGN_KEY, API_KEY]

JOB = r'''
import json, os, time
print("has key:", "MY_API_KEY" in os.environ, "notify vars:", sum(k.startswith("GPUJOB_NOTIFY") for k in os.environ), flush=True)
stop = os.environ["GPUJOB_STOP_FILE"]
open(stop + ".watch", "w").close()
i = 0
while not os.path.exists(stop):
    i += 1
    with open(os.environ["GPUJOB_METRICS_FILE"], "a") as m:
        m.write(json.dumps({"step": i, "loss": 1.0 / i}) + "\n")
    time.sleep(0.2)
print("saved", flush=True)
'''


KEY_MATERIAL: list[str] = []  # the body lines of gpujob's private keys, filled once they exist


def found_in(text: str) -> list[str]:
    return [s for s in SECRETS + KEY_MATERIAL if s in text] + (["a private key"] if "PRIVATE KEY-----" in text else [])


def _key_material(config: Path) -> list[str]:
    """The base64 lines of every private key gpujob keeps (the first, OpenSSH's common header, left out)."""
    out = []
    for p in [config / "id_ed25519", *(config / "keys").glob("*_ed25519")]:
        body = [line for line in p.read_text().splitlines() if line and not line.startswith("-----")]
        out += [line for line in body[1:] if len(line) >= 40]
    assert out
    return out


def test_no_secret_anywhere(ssh_host: str, tmp_path: Path, hook: Hook, isolated: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    isolated.mkdir(parents=True, exist_ok=True)
    sf = isolated / "secrets.env"
    sf.write_text(f"HOOK_TOKEN={HOOK_TOKEN}\n")
    sf.chmod(0o600)
    monkeypatch.setenv("MY_API_KEY", API_KEY)
    base = hook.url.rsplit("/", 1)[0]
    KEY_MATERIAL[:] = _key_material(isolated)
    d = tmp_path / "proj"
    d.mkdir()
    (d / "main.py").write_text(JOB)
    # what a project folder may hold by accident: none of it may leave (gpujob/usecases/secrets)
    (d / ".env").write_text(f"HOOK_TOKEN={HOOK_TOKEN}\nMY_API_KEY={API_KEY}\n")
    (d / "deploy_key").write_bytes((isolated / "id_ed25519").read_bytes())
    (d / "notes.txt").write_text(f"the signing key is {SIGN_KEY}\n")
    (d / "job.yaml").write_text(json.dumps({
        "name": "secretive", "run": "python main.py", "secrets": ["MY_API_KEY"],
        "autostop": {"max_runtime": "4s", "check_every": "1s"},
        "notify": {"on": ["started", "autostopped"],
                   "channels": [{"type": "webhook", "url": base + "/${HOOK_TOKEN}", "secret": SIGN_KEY}]},
    }))
    r = run_cli("submit", str(d / "job.yaml"), "--host", ssh_host, "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    job_id = json.loads(r.stdout)["job_id"]
    assert not found_in(r.stdout + r.stderr)

    hook.wait_for("started", 30)
    deadline, seen = time.time() + 20, False
    while time.time() < deadline and not seen:  # every snapshot while the job starts and runs
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert not found_in(ps), ps
        seen = "python main.py" in ps
        time.sleep(0.2)
    assert seen

    g = hook.wait_for("autostopped", 60)
    assert g["path"] == f"/hook/{HOOK_TOKEN}"  # the secret reached the endpoint, and only its URL
    outputs = []
    for args in (("status", job_id), ("ls",), ("tail", job_id, "-n", "100")):
        r = run_cli(*args, "--host", ssh_host, "--json")
        assert r.returncode == 0, r.stderr
        outputs.append(r.stdout + r.stderr)
        r = run_cli(*args, "--host", ssh_host, env_extra={"GPUJOB_DEBUG": "1"})  # the drawing, debug on
        assert r.returncode == 0, r.stderr
        outputs.append(r.stdout + r.stderr)
    for out in outputs:
        assert not found_in(out), out
    for req in hook.got:
        assert not found_in(req["raw"].decode()), req["raw"]
        assert not found_in(json.dumps({k: v for k, v in req["headers"].items()}))

    root = tmp_path / "remote-root"
    secrets_file = root / "jobs" / job_id / "secrets.json"
    assert secrets_file.stat().st_mode & 0o777 == 0o600
    assert set(json.loads(secrets_file.read_text()).values()) == set(SECRETS)
    code = root / "projects" / "secretive" / "code"
    assert (code / "main.py").exists() and not {".env", "deploy_key", "notes.txt"} & {p.name for p in code.iterdir()}
    keys = {isolated / "id_ed25519", *(isolated / "keys").glob("*_ed25519")}
    scanned = 0
    for base_dir, skip in ((root, {secrets_file}), (isolated, {sf} | keys)):
        for p in base_dir.rglob("*"):
            if p.is_file() and not p.is_symlink() and p not in skip:
                data = p.read_bytes().decode("utf-8", "replace")
                assert not found_in(data), p
                scanned += 1
    assert scanned > 20
    log = (root / "jobs" / job_id / "output.log").read_text()
    assert "has key: True notify vars: 0" in log and "saved" in log
    assert (root / "agent.log").exists() or (root / "jobs" / job_id / "agent.log").exists()


def _tty_session_of(sshd: Sshd) -> bool:
    """Whether this test's sshd serves an interactive session (``sshd: user@pts/N``, as the watcher sees it)."""
    for pid in _descendants(sshd.proc.pid):
        try:
            if b"@pts/" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            pass
    return False


def test_idle_watcher_powers_off_only_when_idle(ssh_host: str, sshd: Sshd, tmp_path: Path, hook: Hook) -> None:
    import paramiko

    from gpujob.config.hosts import HostStore
    from gpujob.transport.ssh import open_client
    from remote.jobs.lost import LOST_MARK
    from tests.remote.run.test_events import notify_cfg

    root = tmp_path / "remote-root"
    root.mkdir(parents=True, exist_ok=True)
    # the watcher looks every 0.5 s; a job whose agent is gone is lost after 1 s without a heartbeat
    (root / "agent.env").write_text("GPUJOB_IDLE_POLL=0.5\nGPUJOB_STALE_AFTER=1\n")
    log = tmp_path / "shutdown.log"
    stand_in = tmp_path / "fake-shutdown"
    stand_in.write_text(f'#!/bin/sh\necho "$(date +%s.%N) idle shutdown" >> {log}\n')
    stand_in.chmod(0o755)
    d = tmp_path / "p"
    d.mkdir()
    (d / "main.py").write_text("import time\ntime.sleep(4)\nprint('done')\n")
    (d / "job.yaml").write_text(json.dumps({"name": "short", "run": "python main.py"}))
    # the tick counter: each tick of the watcher announces newly lost jobs, marking each once
    # (remote/run/events.py LOST_MARK); a mark removed by the test comes back on the next tick
    probe = submit(ssh_host, write_job(tmp_path, "probe", "import time; print('up', flush=True); time.sleep(600)",
                                       "python main.py", notify=notify_cfg(hook, ["lost"])))["job_id"]
    probe_dir = root / "jobs" / probe
    wait_state(ssh_host, probe, ("running",), 60, root=root)
    pst = json.loads((probe_dir / "status.json").read_text())
    os.kill(pst["supervisor_pid"], signal.SIGKILL)  # its agent dies: the job is lost, not running
    os.killpg(pst["child_pid"], signal.SIGKILL)
    mark = probe_dir / LOST_MARK

    def next_tick(what: str) -> None:
        mark.unlink()
        wait_for(lambda: mark.exists() or log.exists(), 20, f"the watcher's tick ({what})", interval=0.05)

    # an interactive SSH session (a tty): the watcher must wait for it too
    client: paramiko.SSHClient = open_client(HostStore().get(ssh_host))
    shell = client.invoke_shell()
    wait_for(lambda: _tty_session_of(sshd), 10, "the tty session", interval=0.05)
    r = run_cli("submit", str(d / "job.yaml"), "--host", ssh_host, "--json")
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    r = run_cli("host", "set", ssh_host, "--shutdown-command", str(stand_in), "--idle-shutdown", "2s")
    assert r.returncode == 0, r.stderr + r.stdout
    st = wait_state(ssh_host, job_id, ("succeeded", "failed"), 30, root=root)
    assert st["state"] == "succeeded"
    wait_for(mark.exists, 20, "the watcher announcing the probe lost")
    # idle long enough (2 s since the last job ran or waited), but the tty session is open: two
    # ticks later (the first one's check is over once the second starts), nothing has fired
    idle_enough = max(st["ended_at"], float(mark.read_text())) + 2.0
    wait_for(lambda: time.time() >= idle_enough, 10, "2 s of idleness", interval=0.05)
    next_tick("after 2 idle seconds")
    next_tick("the one after")
    assert not log.exists(), "powered off under an open SSH session"
    shell.close()
    client.close()
    closed_at = time.time()
    deadline = time.time() + 20
    while time.time() < deadline and not log.exists():
        time.sleep(0.2)
    assert log.exists(), "the idle watcher never powered off"
    shut_at = float(log.read_text().split()[0])
    assert shut_at >= st["ended_at"] + 2 and shut_at >= closed_at + 1.5
    assert os.path.exists(root / "idle-watch.json")


def test_idle_watcher_setting_outlives_its_process(ssh_host: str, tmp_path: Path) -> None:
    """The profile keeps --idle-shutdown; a watcher that died (reboot, crash) is started again by the next command."""
    r = run_cli("host", "set", ssh_host, "--shutdown-command", "/bin/true", "--idle-shutdown", "30m", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["idle_shutdown"] == "30m"  # JSON stays JSON
    state = tmp_path / "remote-root" / "idle-watch.json"
    first = json.loads(state.read_text())["pid"]
    os.kill(first, signal.SIGKILL)
    from remote.core.procs import pid_alive

    wait_for(lambda: not pid_alive(first), 10, "the killed watcher gone")  # as the agent judges it
    assert run_cli("ls", "--host", ssh_host).returncode == 0
    revived = json.loads(state.read_text())["pid"]
    assert revived != first
    os.kill(revived, 0)  # alive
    r = run_cli("host", "set", ssh_host, "--idle-shutdown", "off", "--json")
    assert "idle_shutdown" not in json.loads(r.stdout) and not state.exists()
