"""Provisioning over a real sshd with an AutoDL-like layout under the temporary root.

``setup:``/``requirements:`` run once per content hash; a changed requirements file reruns
them; a failing pip install (local-only index: nothing reaches the internet) fails the job
with its output and keeps the earlier environment; two jobs on one hash provision once.
"""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import status, submit, wait_state


def make_wheel(folder: Path) -> Path:
    """A real, tiny, pure-Python wheel pip can install with --no-index --find-links."""
    folder.mkdir(parents=True, exist_ok=True)
    whl = folder / "tinypkg_gj-1.0-py3-none-any.whl"
    info = "tinypkg_gj-1.0.dist-info"
    files = {
        "tinypkg_gj/__init__.py": "V = 1\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: tinypkg-gj\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpujob-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(whl, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr(f"{info}/RECORD", "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n")
    return whl


@pytest.fixture
def autodl(sshd, tmp_path: Path) -> dict:
    """Host ``adl``: root <fs>/root/autodl-tmp/gpujob, a network_turbo file, local-only pip."""
    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.keys import public_key_line

    fs = tmp_path / "fs"
    (fs / "root" / "autodl-tmp").mkdir(parents=True)
    (fs / "etc").mkdir()
    turbo = fs / "etc" / "network_turbo"
    turbo.write_text("export http_proxy=http://127.0.0.1:9\nexport https_proxy=http://127.0.0.1:9\n")
    wheels = tmp_path / "wheels"
    make_wheel(wheels)
    sshd.authorize(public_key_line())
    root = fs / "root" / "autodl-tmp" / "gpujob"
    host = Host(
        name="adl", hostname="127.0.0.1", port=sshd.port, user=os.environ.get("USER", "root"), root=str(root),
        preset="autodl", network_turbo="run", hf_endpoint="https://hf-mirror.com",
        pip_index_url="http://127.0.0.1:9/simple", connect_timeout=5,
        env={"GPUJOB_PATH_PREFIX": str(Path(sys.executable).parent), "GPUJOB_NETWORK_TURBO_FILE": str(turbo),
             "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels), "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    HostStore().save(host)
    return {"host": "adl", "root": root, "fs": fs}


def write_project(d: Path, requirements: str, setup: str, run: str, python: str | None = "venv") -> Path:
    d.mkdir(exist_ok=True)
    (d / "requirements.txt").write_text(requirements)
    spec = {"name": "prov", "run": run, "setup": setup, "requirements": "requirements.txt",
            "env": {"COUNTER": str(d.parent / "counter.txt")}}
    if python:
        spec["python"] = python
    (d / "job.yaml").write_text(json.dumps(spec))
    return d / "job.yaml"


def submit_wait(host: str, job: Path, root: Path, timeout: float = 120) -> dict:
    """Submit, then wait on status.json (the instance's root is on this machine: no CLI process
    per poll on 2 shared cores); the final answer comes from ``gpujob status``."""
    return wait_state(host, submit(host, job)["job_id"], ("succeeded", "failed", "stopped"), timeout, root=root)


def log_of(root: Path, st: dict) -> str:
    return (root / "jobs" / st["job_id"] / "output.log").read_text()


RUN = ('python -c "import sys, tinypkg_gj, importlib.util as u; '
       "print('tiny', tinypkg_gj.V, sys.prefix, u.find_spec('torch') is not None)\"; "
       'echo "proxy=$http_proxy hf=$HF_ENDPOINT index=$PIP_INDEX_URL pipcache=$PIP_CACHE_DIR hfhome=$HF_HOME"')


def counter(tmp_path: Path) -> int:
    p = tmp_path / "counter.txt"
    return len(p.read_text().splitlines()) if p.exists() else 0


def test_setup_once_per_hash_rerun_on_change_failure_keeps_env(autodl: dict, tmp_path: Path) -> None:
    root, host = autodl["root"], autodl["host"]
    job = write_project(tmp_path / "proj", "tinypkg-gj\n", 'echo setup-ran >> "$COUNTER"; echo "setup proxy=${http_proxy:-none}"', RUN)

    st1 = submit_wait(host, job, root)
    log1 = log_of(root, st1)
    assert st1["state"] == "succeeded", log1
    assert counter(tmp_path) == 1
    assert "==> gpujob: setup started" in log1 and "==> gpujob: setup done" in log1
    assert "setup proxy=none" in log1  # network_turbo: run → not sourced for setup
    venvs = sorted(p.name for p in (root / "envs").glob("venv-*"))
    assert len(venvs) == 1
    first_hash = venvs[0][5:]
    assert (root / "envs" / f"{first_hash}.ok").exists()
    # the run used the venv's python (first on PATH), which still sees the image's torch
    assert f"tiny 1 {root / 'envs' / venvs[0]} True" in log1
    assert "proxy=http://127.0.0.1:9" in log1 and "hf=https://hf-mirror.com" in log1
    assert "index=http://127.0.0.1:9/simple" in log1
    assert f"pipcache={root / 'cache' / 'pip'}" in log1 and f"hfhome={root / 'cache' / 'huggingface'}" in log1

    st2 = submit_wait(host, job, root)
    log2 = log_of(root, st2)
    assert st2["state"] == "succeeded", log2
    assert counter(tmp_path) == 1  # skipped
    assert f"==> gpujob: setup skipped: environment {first_hash} is provisioned" in log2
    assert "setup started" not in log2

    (job.parent / "requirements.txt").write_text("tinypkg-gj\n# v2\n")
    st3 = submit_wait(host, job, root)
    assert st3["state"] == "succeeded", log_of(root, st3)
    assert counter(tmp_path) == 2  # the changed requirements file reran setup
    assert "setup started" in log_of(root, st3)
    oks_before = sorted(p.name for p in (root / "envs").glob("*.ok"))
    venvs_before = sorted(p.name for p in (root / "envs").glob("venv-*"))
    assert len(oks_before) == 2 and len(venvs_before) == 2

    (job.parent / "requirements.txt").write_text("tinypkg-gj\nnonexistent-pkg-xyz\n")
    st4 = submit_wait(host, job, root)
    log4 = log_of(root, st4)
    assert st4["state"] == "failed" and st4["reason"] == "setup failed", log4
    assert "nonexistent-pkg-xyz" in log4 and "==> gpujob: setup failed with exit code" in log4
    assert "attempt 1 started" not in log4  # the run command never ran
    assert any("nonexistent-pkg-xyz" in line for line in st4.get("log_tail", [])), st4.get("log_tail")
    assert counter(tmp_path) == 2
    assert sorted(p.name for p in (root / "envs").glob("*.ok")) == oks_before  # no marker for the failed hash
    assert sorted(p.name for p in (root / "envs").glob("venv-*")) == venvs_before  # half-built venv removed
    assert (root / "envs" / venvs[0] / "lib").is_dir()

    (job.parent / "requirements.txt").write_text("tinypkg-gj\n")  # back to the first: still provisioned
    st5 = submit_wait(host, job, root)
    assert st5["state"] == "succeeded", log_of(root, st5)
    assert counter(tmp_path) == 2
    assert f"setup skipped: environment {first_hash}" in log_of(root, st5)


def test_two_jobs_same_hash_provision_once(tmp_path: Path) -> None:
    """Image python (no venv): the lock file makes the second job wait, then skip."""
    job = write_project(tmp_path / "proj2", "# nothing\n", 'sleep 1.5; echo x >> "$COUNTER"', "echo ran", python=None)
    ids = [submit("local", job)["job_id"] for _ in range(2)]
    root = Path(os.environ["GPUJOB_LOCAL_ROOT"])
    states = [wait_state("local", i, ("succeeded", "failed"), 60, root=root)["state"] for i in ids]
    assert states == ["succeeded", "succeeded"]
    assert counter(tmp_path) == 1
    logs = [(root / "jobs" / i / "output.log").read_text() for i in ids]
    assert sum("setup started" in t for t in logs) == 1
    assert sum("setup skipped" in t for t in logs) == 1


def test_failing_setup_command_and_missing_conda_env(tmp_path: Path) -> None:
    job = write_project(tmp_path / "proj3", "# nothing\n", "echo about-to-fail; exit 3", "echo never", python=None)
    root = Path(os.environ["GPUJOB_LOCAL_ROOT"])
    st = submit_wait("local", job, root)
    log = log_of(root, st)
    assert st["state"] == "failed" and st["reason"] == "setup failed" and st["exit_code"] == 3, log
    assert "about-to-fail" in log and "never" not in log.replace("echo never", "")
    assert not list((root / "envs").glob("*.ok"))
    diag = status("local", st["job_id"])["diagnosis"]  # the setup's failure, not a traceback to read
    assert diag["summary"] == "setup failed with exit code 3" and "gpujob tail" in diag["remedy"], diag
    assert "traceback" not in diag["remedy"], diag

    job = write_project(tmp_path / "proj4", "# nothing\n", "true", "echo never", python="conda:nosuchenv")
    jobs_before = set((root / "jobs").iterdir())
    r = run_cli("submit", str(job), "--host", "local")  # refused at submit: it made a job that failed in setup
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and "python: conda env 'nosuchenv' is not on local" in said, said
    assert "nothing was submitted" in said and set((root / "jobs").iterdir()) == jobs_before, said


def test_names_gpujob_puts_into_setups_shell_are_text(tmp_path: Path) -> None:
    """A requirements file and a PATH folder whose names hold ``$(…)``: setup's shell ran them (the
    name was put between double quotes, where ``$(`` still expands). Each is quoted whole."""
    job = write_job_with_req(tmp_path, "req$(touch PWNED).txt")
    odd = tmp_path / "bin$(touch PWNED)"
    odd.mkdir()
    r = run_cli("submit", str(job), "--host", "local", "--json",
                env_extra={"PATH": f"{odd}{os.pathsep}{os.environ['PATH']}"})
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    st = wait_state("local", job_id, ("succeeded", "failed"), 120)
    assert st["state"] == "succeeded", st
    assert not list(tmp_path.rglob("PWNED")), list(tmp_path.rglob("PWNED"))
    log = run_cli("tail", job_id, "--host", "local").stdout
    assert "setup pip install -r req$(touch PWNED).txt" in log and str(odd) in log, log


def write_job_with_req(tmp_path: Path, req: str) -> Path:
    d = tmp_path / "quoted"
    d.mkdir()
    (d / "main.py").write_text("import os\nprint(os.environ['PATH'])\n")
    (d / req).write_text("")  # nothing to install: pip reads it and is done
    (d / "job.yaml").write_text(json.dumps({"name": "quoted", "run": "python main.py", "requirements": req}))
    return d / "job.yaml"
