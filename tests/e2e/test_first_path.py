"""End to end on ``local`` and over a real sshd: submit, status, tail, stop, pull, detach."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.helpers import EXAMPLE, job_processes, needs, submit, wait_state, write_job


def test_example_runs_to_success_tail_and_pull(any_host: str, tmp_path: Path) -> None:
    needs("torch")
    res = submit(any_host)
    job_id = res["job_id"]
    assert res["state"] in ("queued", "running", "succeeded")
    assert res["sync"]["files_sent"] >= 2
    st = wait_state(any_host, job_id, ("succeeded", "failed"))
    assert st["state"] == "succeeded", st
    assert st["exit_code"] == 0 and st["attempt"] == 1
    assert st["last_metrics"]["step"] == 200
    assert [c["name"] for c in st["checkpoints"] if c["complete"]][-1] == "step-200"

    tail = run_cli("tail", job_id, "--host", any_host, "-n", "5")
    assert tail.returncode == 0, tail.stderr
    assert "done" in tail.stdout and "attempt 1 ended with exit code 0" in tail.stdout
    assert len(tail.stdout.strip().splitlines()) == 5

    ls = json.loads(run_cli("ls", "--host", any_host, "--json").stdout)
    assert job_id in [j["job_id"] for j in ls["jobs"]]

    # a second submit of unchanged code sends nothing
    again = submit(any_host)
    assert again["sync"]["files_sent"] == 0 and again["sync"]["unchanged"] >= 2

    pulled = run_cli("pull", job_id[:-2], str(tmp_path / "pulled"), "--host", any_host, "--json")
    assert pulled.returncode == 0, pulled.stderr
    dest = Path(json.loads(pulled.stdout)["dest"])
    assert (dest / "ckpt" / "step-200" / "state.pt").is_file()
    assert (dest / "ckpt" / "step-200" / ".gpujob-complete").is_file()
    assert "done" in (dest / "output.log").read_text()


SNAPSHOT = """\
# version {n}
import os, pathlib, time
gate = pathlib.Path(os.environ["GPUJOB_JOB_DIR"]) / "go"
while {n} == 1 and not gate.exists():  # the first job reads its code once the second one is submitted
    time.sleep(0.05)
print(open("main.py").read(), flush=True)
"""


def test_job_code_is_a_snapshot(tmp_path: Path) -> None:
    """A running job keeps the code it was submitted with when the project is submitted again with
    changed code: the second job runs the new code, the first the old one."""
    job = write_job(tmp_path, "snap", SNAPSHOT.format(n=1), "python main.py")
    first = submit("local", job)["job_id"]
    wait_state("local", first, ("running",))
    (job.parent / "main.py").write_text(SNAPSHOT.format(n=2))
    second = submit("local", job)["job_id"]
    (tmp_path / "local-root" / "jobs" / first / "go").touch()
    for job_id in (first, second):
        assert wait_state("local", job_id, ("succeeded", "failed"))["state"] == "succeeded"
    out1 = run_cli("tail", first, "-n", "50").stdout
    out2 = run_cli("tail", second, "-n", "50").stdout
    assert "# version 1" in out1 and "# version 2" not in out1, out1
    assert "# version 2" in out2 and "# version 1" not in out2, out2


def test_stop_leaves_no_process(any_host: str, tmp_path: Path) -> None:
    script = """
        import os, subprocess, sys, time
        # grandchildren in sessions of their own, as torchrun workers are
        for _ in range(2):
            subprocess.Popen(["setsid", "sleep", "600"])
        subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(600)"])
        print("started", flush=True)
        time.sleep(600)
    """
    job = write_job(tmp_path, "long", script, "python main.py", stop={"grace": "3s"})
    job_id = submit(any_host, job)["job_id"]
    wait_state(any_host, job_id, ("running",))
    deadline = time.time() + 20
    while len(job_processes(job_id)) < 4 and time.time() < deadline:
        time.sleep(0.2)
    assert len(job_processes(job_id)) >= 4
    r = run_cli("stop", job_id, "--host", any_host, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["state"] == "stopped"
    assert job_processes(job_id) == []


def test_job_survives_killed_client(any_host: str, tmp_path: Path) -> None:
    job = write_job(tmp_path, "detach", "import time\nfor i in range(6):\n    print('tick', i, flush=True)\n    time.sleep(0.5)\n",
                    "python main.py")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "submit", str(job), "--host", any_host, "--follow"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    assert p.stdout is not None
    line = b""
    deadline = time.time() + 30
    while b"tick 0" not in line and time.time() < deadline:
        line = p.stdout.readline()
    assert b"tick 0" in line
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    ls = json.loads(run_cli("ls", "--host", any_host, "--json").stdout)["jobs"]
    job_id = [j for j in ls if j["name"] == "detach"][-1]["job_id"]
    st = wait_state(any_host, job_id, ("succeeded", "failed", "lost"))
    assert st["state"] == "succeeded"
    assert "tick 5" in run_cli("tail", job_id, "--host", any_host).stdout


def test_failed_job_shows_cause(tmp_path: Path) -> None:
    job = write_job(tmp_path, "bad", "import nosuchmodule_xyz\n", "python main.py")
    job_id = submit("local", job)["job_id"]
    st = wait_state("local", job_id, ("failed",))
    assert st["diagnosis"]["cause"] == "missing_module"
    assert "nosuchmodule_xyz" in st["diagnosis"]["summary"]
    human = run_cli("status", job_id)
    assert "requirements" in human.stdout


# ---- errors a user can cause ------------------------------------------------------------
def test_bad_yaml_names_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text("name: x\nrun: python a.py\nenv: [unclosed\n")
    r = run_cli("submit", str(bad))
    assert r.returncode == 2
    assert f"{bad}:4:1" in r.stderr or f"{bad}:3" in r.stderr, r.stderr
    assert "not valid YAML" in r.stderr


def test_misspelt_key_did_you_mean(tmp_path: Path) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text("name: x\nrun: python a.py\ncheckpiont:\n  keep: 2\nretry:\n  max_restarts: three\n")
    r = run_cli("submit", str(bad), "--json")
    assert r.returncode == 2
    err = json.loads(r.stdout)["error"]
    assert f"{bad}:3:1" in err and "did you mean 'checkpoint'" in err
    assert f"{bad}:6:3" in err and "expected a number" in err
    assert "nothing was sent" in json.loads(r.stdout)["remedy"]


def test_set_overrides_a_key(tmp_path: Path) -> None:
    from gpujob.config.spec import load_spec

    spec = load_spec(EXAMPLE, ["retry.max_restarts=4", "gpus=2", "env.LR=3e-4"])
    assert spec.retry.max_restarts == 4 and spec.gpus == 2 and spec.env["LR"] == "3e-4"
    from gpujob.errors import SpecError

    with pytest.raises(SpecError, match="--set gpus"):
        load_spec(EXAMPLE, ["gpus=many"])


def test_unknown_host(tmp_path: Path) -> None:
    r = run_cli("submit", str(EXAMPLE), "--host", "a10O")
    assert r.returncode == 2
    assert "unknown host 'a10O'" in r.stderr and "gpujob host add a10O" in r.stderr


def test_wrong_port(tmp_path: Path) -> None:
    from tests.conftest import free_port

    r = run_cli("host", "add", "gone", "--ssh", f"ssh -p {free_port()} root@127.0.0.1")
    assert r.returncode == 3
    # the profile was never saved: the way on is host add again, not host set
    assert "refused the connection" in r.stderr and "nothing was saved" in r.stderr, r.stderr
    assert "gpujob host add gone --ssh" in r.stderr and "host set" not in r.stderr, r.stderr
    r = run_cli("host", "add", "gone", "--ssh", "ssh -p 22 root@no-such-host.invalid")
    assert r.returncode == 3 and "cannot resolve" in r.stderr and "gpujob host add gone" in r.stderr, r.stderr
    assert "host set" not in r.stderr and "powered on" not in r.stderr, r.stderr


def test_a_wrong_identity_file_is_named_not_taken_for_a_silent_instance(sshd, tmp_path: Path) -> None:
    """A missing --identity file, a public key given for the private one, and a saved profile whose key
    was deleted since: each named before any connection (it read "is the instance powered on?")."""
    from gpujob.config.hosts import HostStore

    key = tmp_path / "mine"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    sshd.authorize(Path(f"{key}.pub").read_text().strip())
    for given, why in ((tmp_path / "nosuch", "does not exist"), (Path(f"{key}.pub"), "is not a private key (it is the public half")):
        r = run_cli("host", "add", "box", "--ssh", sshd.ssh_line(), "--identity", str(given))
        assert r.returncode == 2, r.stderr
        assert f"--identity: {given} {why}" in r.stderr or f"key file {given} {why}" in r.stderr, r.stderr
        assert "nothing was saved" in r.stderr and "powered on" not in r.stderr and "host set" not in r.stderr, r.stderr
    assert [h.name for h in HostStore().all()] == ["local"]
    r = run_cli("host", "add", "box", "--ssh", sshd.ssh_line(), "--identity", str(key), "--root", str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    key.unlink()  # moved or deleted after the profile was saved
    r = run_cli("doctor", "box")
    assert r.returncode == 2 and f"box: the key file {key} does not exist" in r.stderr, r.stderr
    assert "gpujob host set box --identity" in r.stderr and "powered on" not in r.stderr, r.stderr


def test_refused_key(sshd, tmp_path: Path) -> None:
    from tests.conftest import start_sshd, stop_sshd

    # gpujob's key is not in authorized_keys and no password is available (the host takes passwords)
    pw = start_sshd(tmp_path / "pw", extra="PasswordAuthentication yes")
    try:
        r = run_cli("host", "add", "box", "--ssh", pw.ssh_line())
        assert r.returncode == 3
        assert "needs a password once" in r.stderr and "--password-stdin" in r.stderr and "--identity" in r.stderr
        r = run_cli("host", "add", "box", "--ssh", pw.ssh_line(), "--password-stdin", input="not-the-password\n")
        assert r.returncode == 3 and "refused the password" in r.stderr and "copy the root password" in r.stderr, r.stderr
    finally:
        stop_sshd(pw)
    # a host with password logins off (the fixture's sshd): no password is asked for, none is said refused
    r = run_cli("host", "add", "box", "--ssh", sshd.ssh_line())
    err = " ".join(r.stderr.split())
    assert r.returncode == 3 and "refused gpujob's key" in err and "takes no password login (it offers publickey)" in err, err
    assert "needs a password" not in err and "--identity ~/.ssh/KEY" in err and "nothing was saved" in err, err
    r = run_cli("host", "add", "box", "--ssh", sshd.ssh_line(), "--password-stdin", input="whatever\n")
    err = " ".join(r.stderr.split())
    assert r.returncode == 3 and "takes no password login" in err and "refused the password" not in err, err
    from gpujob.config.hosts import HostStore

    assert [h.name for h in HostStore().all()] == ["local"]  # nothing half-saved
    # the hint's other way: a key of the user's own that the instance already accepts
    key = tmp_path / "mine"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    sshd.authorize(Path(f"{key}.pub").read_text().strip())
    r = run_cli("host", "add", "box", "--ssh", sshd.ssh_line(), "--identity", str(key), "--root", str(tmp_path / "r"))
    assert r.returncode == 0 and "host box = " in r.stdout, r.stderr
    r = run_cli("host", "ls", env_extra={"COLUMNS": "80"})  # a long root folds; the address keeps its port
    assert f"root@127.0.0.1:{sshd.port}" in r.stdout.split(), r.stdout


def test_host_add_then_changed_host_key_is_refused(sshd, tmp_path: Path) -> None:
    from gpujob.config.keys import public_key_line
    from tests.conftest import start_sshd, stop_sshd

    sshd.authorize(public_key_line())
    r = run_cli("host", "add", "box", "--ssh", sshd.ssh_line(), "--root", str(tmp_path / "rr"),
                "--hf-endpoint", "https://hf-mirror.com", "--network-turbo", "setup")  # the settings host set takes
    assert r.returncode == 0, r.stderr
    assert oct(os.stat(Path(os.environ["GPUJOB_CONFIG_DIR"]) / "hosts.yaml").st_mode & 0o777) == "0o600"
    hl = run_cli("host", "ls", "--json")
    assert [h["name"] for h in json.loads(hl.stdout)] == ["local", "box"]
    box = json.loads(hl.stdout)[1]
    assert (box["hf_endpoint"], box["network_turbo"]) == ("https://hf-mirror.com", "setup")
    # the instance is re-created: same address, new host key
    stop_sshd(sshd)
    s2 = start_sshd(tmp_path / "sshd2", port=sshd.port)
    try:
        s2.authorize(public_key_line())
        r = run_cli("ls", "--host", "box")
        assert r.returncode == 3
        assert "CHANGED" in r.stderr and "gpujob host trust box" in r.stderr
        assert run_cli("host", "trust", "box").returncode == 0
        assert run_cli("ls", "--host", "box").returncode == 0
    finally:
        stop_sshd(s2)


def test_parse_login_lines() -> None:
    from gpujob.config.hosts import parse_ssh_target

    assert parse_ssh_target("ssh -p 41234 root@connect.westb.seetacloud.com") == {
        "port": 41234, "user": "root", "hostname": "connect.westb.seetacloud.com"}
    assert parse_ssh_target("root@region-1.autodl.com:2222") == {"user": "root", "hostname": "region-1.autodl.com", "port": 2222}
    assert parse_ssh_target("ssh -p41234 -i ~/.ssh/k ubuntu@1.2.3.4")["identity_file"].endswith("/.ssh/k")
    from gpujob.errors import HostError

    with pytest.raises(HostError, match="not a port"):
        parse_ssh_target("ssh -p abc root@h")


def test_wheel_carries_the_agent(tmp_path: Path) -> None:
    """A non-editable install (built wheel in a fresh venv) can upload its agent and run a job."""
    needs("build", "hatchling")
    dist = tmp_path / "dist"
    b = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", str(dist), str(REPO)],
                       capture_output=True, text=True)
    if b.returncode != 0 and "hatchling" in b.stderr:
        pytest.fail("hatchling missing: pip install hatchling (CI installs it)")
    assert b.returncode == 0, b.stderr[-2000:]
    wheel = next(dist.glob("gpujob-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True)
    job = write_job(tmp_path, "wheel", "print('from the wheel')\n", "python main.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(venv / "bin" / "gpujob"), "submit", str(job), "--follow"], capture_output=True, text=True,
                       env=env, cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "from the wheel" in r.stdout
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "gpujob/_remote/run/supervisor.py" in names and "gpujob/_templates/runtime/gpujob_runtime.py" in names
    assert {f"gpujob/dashboard/static/{f}" for f in ("index.html", "app.js", "uPlot.iife.min.js", "uPlot.LICENSE")} <= set(names)
    assert "gpujob/py.typed" in names  # PEP 561: a project that imports gpujob type-checks against its hints
    # the agent modules the laptop shares (GPU placement, a move's transfer) import each other as
    # ``remote.x``: from the wheel, with this checkout off sys.path, they still load
    probe = (f"import sys; sys.path = [p for p in sys.path if not p.startswith({str(REPO)!r})]\n"
             "from gpujob.bundle import import_remote\n"
             "print(import_remote('host.gpus').FREE_MEM_MIB > 0, callable(import_remote('data.transfer').send_list))\n"
             "import remote, gpujob; print(remote.__path__[0].startswith(gpujob.__path__[0]))")
    r = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["True", "True", "True"], r.stderr[-2000:] + r.stdout
