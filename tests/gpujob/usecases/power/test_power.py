"""Power lifecycle with real processes at the boundary: a provider's switch (tests/stand_ins/power_switch.py)
that starts and stops a real sshd in a network namespace on a new port each time, a state command that
says "starting", then "running" before sshd listens, power-ons refused for lack of GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, SSHD, run_cli
from tests.helpers import remote_root, wait_state, write_job

SWITCH = REPO / "tests" / "stand_ins" / "power_switch.py"
FAST = {"GPUJOB_POWER_POLL": "0.2", "GPUJOB_POWER_RETRY": "0.2"}
SLEEPER = "import time\nfor i in range(600):\n    print('step', i, flush=True)\n    time.sleep(0.5)\n"


@pytest.fixture
def lab() -> Iterator[object]:
    from tests.netlab import make_lab

    lab = make_lab(1)
    try:
        yield lab
    finally:
        lab.close()


def switch_host(tmp_path: Path, name: str, lab: object | None, **conf: object) -> Path:
    """A profile ``name`` whose power commands drive the stand-in switch (state in tmp_path/name-switch)."""
    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.keys import public_key_line

    d = tmp_path / f"{name}-switch"
    d.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "hostkey")], check=True)
    (d / "authorized_keys").write_text(public_key_line() + "\n")
    addr = lab.addr(0) if lab is not None else "10.255.255.1"  # type: ignore[attr-defined]
    user = os.environ.get("USER", "root")
    (d / "conf.json").write_text(json.dumps({"ns": lab.namespaces[0] if lab else "", "addr": addr,  # type: ignore[attr-defined]
                                             "user": user, "sshd": SSHD, **conf}))
    cmd = f"{sys.executable} {SWITCH} {d}"
    HostStore().save(Host(
        name=name, hostname=addr, port=2, user=user, root=str(tmp_path / "remote-root"), connect_timeout=5,
        env={"GPUJOB_PATH_PREFIX": str(Path(sys.executable).parent)},
        power={"on": f"{cmd} on", "off": f"{cmd} off", "state": f"{cmd} state", "address": f"{cmd} address",
               "wait": "1m"}))
    return d


def profile(name: str) -> dict:
    r = run_cli("host", "ls", "--json")
    return next(h for h in json.loads(r.stdout) if h["name"] == name)


@pytest.mark.slow
def test_submit_powers_on_a_host_that_moved(tmp_path: Path, lab: object) -> None:
    sw = switch_host(tmp_path, "pw", lab, fail_ons=2, lie=2)
    r = run_cli("host", "state", "pw", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "off", r.stderr
    job = write_job(tmp_path, "sleeper", SLEEPER, "python main.py")
    r = run_cli("submit", str(job), "--host", "pw", env_extra=FAST, timeout=180)
    assert r.returncode == 0, r.stderr + r.stdout
    steps = r.stderr
    # two refusals retried with backoff, the lying state waited out, the new login read; each step timed
    assert steps.count("no GPU free; trying again") == 2, steps
    assert "state pending" in steps and "state on" in steps and "answers over SSH" in steps, steps
    assert "] pw: address" in steps and "(new)" in steps, steps
    port = int((sw / "port").read_text())
    assert profile("pw")["port"] == port  # the profile follows the instance
    job_id = json.loads(run_cli("ls", "--host", "pw", "--json").stdout)["jobs"][0]["job_id"]
    wait_state("pw", job_id, ("running",), timeout=60, root=remote_root(tmp_path, "pw"))

    r = run_cli("host", "off", "pw", "--force", "--json", env_extra=FAST)  # the job runs there: refused without --force
    off = json.loads(r.stdout)
    assert r.returncode == 0 and off["state"] == "off" and off["meter_off_at"], r.stderr
    assert [j["job_id"] for j in off["cut"]] == [job_id]
    assert run_cli("host", "set", "pw", "--released-after", "15d").returncode == 0  # an AutoDL-style platform
    rel = profile("pw")["release"]  # found off just now: its disk is released 15 days after (docs/power.md)
    assert rel["powered_off_at"] == off["meter_off_at"] and rel["left"] == "14 days", rel
    r = run_cli("status", job_id, "--host", "pw")  # the laptop, looking later, says why nothing answers
    assert r.returncode == 3 and "pw is powered off" in r.stderr and "meter off at" in r.stderr, r.stderr
    assert "gpujob host on pw" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("resume", job_id, env_extra=FAST, timeout=120)  # powers it on again: a new port again
    assert r.returncode == 0 and "pw: power on accepted" in r.stderr, r.stderr + r.stdout
    assert profile("pw")["port"] == int((sw / "port").read_text()) != port
    assert "release" not in profile("pw")  # on again: no countdown
    wait_state("pw", job_id, ("running",), timeout=60, root=remote_root(tmp_path, "pw"))
    r = run_cli("host", "state", "pw")
    assert r.returncode == 0 and "pw: on" in r.stdout, r.stderr


def test_host_list_falls_over_when_the_first_has_no_gpu(tmp_path: Path, lab: object) -> None:
    dead = switch_host(tmp_path, "dead", None, stock_out=True)
    from gpujob.config.hosts import HostStore

    store = HostStore()
    h = store.get("dead")
    h.power["wait"] = "1s"
    store.save(h)
    sw = switch_host(tmp_path, "pw", lab)
    job = write_job(tmp_path, "sleeper", SLEEPER, "python main.py")
    r = run_cli("submit", str(job), "--host", "dead,pw", "--json", env_extra=FAST, timeout=180)
    assert r.returncode == 0, r.stderr + r.stdout
    doc = json.loads(r.stdout)
    assert doc["host"] == "pw" and "no GPU free" in doc["skipped"][0]["why"], doc
    assert (dead / "calls.log").read_text().count("on") >= 2  # retried before falling over
    for verb in ("off", "on"):  # someone restarts it from the provider's console: a new port the profile lacks
        subprocess.run([sys.executable, str(SWITCH), str(sw), verb], check=True, capture_output=True)
    r = run_cli("host", "on", "pw", env_extra=FAST, timeout=120)
    assert r.returncode == 0 and profile("pw")["port"] == int((sw / "port").read_text()), r.stderr


def test_power_commands_missing_or_failing_say_so(tmp_path: Path) -> None:
    from gpujob.config.hosts import Host, HostStore

    HostStore().save(Host(name="plain", hostname="10.255.255.2", connect_timeout=2))
    r = run_cli("host", "on", "plain")
    assert r.returncode == 2 and "no power.on command" in r.stderr and "docs/power.md" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_cli("host", "set", "plain", "--power-state", "echo oops >&2; exit 3")
    assert r.returncode == 0, r.stderr
    r = run_cli("host", "state", "plain")
    assert r.returncode == 2 and "power.state of plain failed (exit 3): oops" in r.stderr, r.stderr
    for flag, bad, said in (("--power-wait", "soon", "is not a duration"), ("--power-stock-out", "(", "not a regular")):
        r = run_cli("host", "set", "plain", flag, bad)
        assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, r.stderr
    # an off that the state never confirms is not reported as done: the meter may still run
    r = run_cli("host", "set", "plain", "--power-off", "true", "--power-state", "echo running",
                "--power-boot-timeout", "1s", "--no-check")
    assert r.returncode == 0, r.stderr
    quick = {"GPUJOB_POWER_POLL": "0.2", "GPUJOB_CONNECT_RETRIES": "1"}
    r = run_cli("host", "off", "plain", "--json", env_extra=quick)  # its jobs cannot be asked: refused
    assert r.returncode == 3 and "whether a job runs there cannot be asked" in r.stdout + r.stderr, r.stdout
    r = run_cli("host", "off", "plain", "--force", "--json", env_extra=quick)
    assert r.returncode == 7 and json.loads(r.stdout)["state"] == "on", r.stdout + r.stderr
    assert "not known to be off: its power.state still says 'on'" in r.stderr and "→" in r.stderr
    run_cli("host", "set", "plain", "--power-state", "")
    r = run_cli("host", "off", "plain", "--force", env_extra=quick)
    assert r.returncode == 7 and "no power.state command to confirm it" in r.stderr, r.stderr


def test_autodl_recipe_against_a_local_api(ssh_host: str, sshd: object) -> None:
    """The AutoDL recipe (gpujob/usecases/power/autodl.py) against a real HTTP server answering as
    AutoDL's Pro API: the token comes from the secrets file, the first power-on finds no GPU."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from gpujob.config.hosts import HostStore
    from gpujob.config.paths import config_dir, write_private

    token = "adl-tok-9f8e7d6c5b"
    seen: list[tuple[str, str]] = []
    ons = []

    class Api(BaseHTTPRequestHandler):
        def answer(self, doc: dict) -> None:
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # noqa: N802
            seen.append((self.path, self.headers.get("Authorization", "")))
            json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path.endswith("power_on"):
                ons.append(1)
                if len(ons) == 1:
                    return self.answer({"code": "NoResource", "msg": "主机GPU资源不足"})
            self.answer({"code": "Success", "msg": "", "data": None})

        def do_GET(self) -> None:  # noqa: N802
            seen.append((self.path, self.headers.get("Authorization", "")))
            if "/status" in self.path:
                return self.answer({"code": "Success", "data": {"status": "running" if ons else "shutdown"}})
            self.answer({"code": "Success", "data": {"ssh_command": sshd.ssh_line()}})  # type: ignore[attr-defined]

        def log_message(self, *a: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        write_private(config_dir() / "secrets.env", f"AUTODL_TOKEN={token}\n")
        store = HostStore()
        h = store.get(ssh_host)
        h.port = 1  # the console's old port: the snapshot gives the new one
        helper = f"{sys.executable} -m gpujob.usecases.power.autodl"
        h.power = {v: f"{helper} {v} uuid-123" for v in ("on", "off", "state", "address")}
        store.save(h)
        env = {**FAST, "GPUJOB_AUTODL_API": f"http://127.0.0.1:{srv.server_address[1]}/api/v1/dev/instance/pro/"}
        r = run_cli("host", "on", ssh_host, env_extra=env, timeout=120)
        assert r.returncode == 0 and f"{ssh_host}: on" in r.stdout, r.stderr + r.stdout
        assert "no GPU free; trying again" in r.stderr and token not in r.stdout + r.stderr
        assert profile(ssh_host)["port"] == sshd.port  # type: ignore[attr-defined]
        assert {a for _, a in seen} == {token} and len(ons) == 2
    finally:
        srv.shutdown()
        srv.server_close()
