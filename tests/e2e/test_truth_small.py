"""Smaller untruths a new user met: Client.exec of a string, pull's default folder sent back up as
code, a large file uploaded as code without a word, the api.md example in an interactive interpreter."""

from __future__ import annotations

import codeop
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import wait_for, wait_state, write_job


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "gpujob.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=env, stdin=subprocess.DEVNULL)


def test_exec_of_a_string_is_one_shell_line() -> None:
    import gpujob

    with gpujob.Client(host="local") as c:
        res = c.exec("echo hi && echo there")
    assert res.exit_code == 0 and (res.output == "hi\nthere\n" or res.output.endswith("\nhi\nthere\n")), res.output


def test_pulls_stay_home_and_a_large_code_file_is_named(tmp_path: Path) -> None:
    job = write_job(tmp_path, "home", "print('hi')", "python main.py")
    proj = job.parent
    with open(proj / "weights.bin", "wb") as f:
        f.truncate(51_000_000)
    r = _cli(proj, "submit", "job.yaml", "--host", "local")
    assert r.returncode == 0, r.stderr
    assert "warning: weights.bin (over 50 MB) was uploaded as code: move it to a data: entry" in r.stderr, r.stderr
    job_id = r.stdout.split()[0]
    wait_state("local", job_id, ("succeeded",))
    r = _cli(proj, "pull", job_id)  # the default folder: ./gpujob-pulls, inside the project
    assert r.returncode == 0 and (proj / "gpujob-pulls" / job_id / "output.log").is_file(), r.stderr
    r = _cli(proj, "submit", "job.yaml", "--host", "local", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["sync"]["files_sent"] == 0 and doc["sync"]["large"] == [], doc["sync"]  # the pull is not code
    assert not (tmp_path / "local-root" / "projects" / "home" / "code" / "gpujob-pulls").exists()
    wait_state("local", doc["job_id"], ("succeeded",))


def test_api_example_pastes_into_an_interactive_interpreter() -> None:
    """The interactive interpreter runs a statement at the first line that completes it: a blank
    line inside the `with` block would run it half-way and fail on the next indented line."""
    import re

    text = (REPO / "docs" / "api.md").read_text()
    code = re.search(r"<!-- api-example -->\s*```python\n(.*?)```", text, re.S).group(1)
    buf: list[str] = []
    statements = 0
    for line in code.splitlines() + [""]:
        buf.append(line)
        if codeop.compile_command("\n".join(buf), "<stdin>", "single") is not None:  # complete: it would run
            if any(b.strip() for b in buf):
                statements += 1
            buf = []
    assert statements == 2  # `import gpujob`, then the whole `with` block


def test_a_typo_in_hosts_yaml_is_an_error_with_did_you_mean(isolated: Path) -> None:
    isolated.mkdir(parents=True, exist_ok=True)
    (isolated / "hosts.yaml").write_text("hosts:\n  box:\n    hostname: 127.0.0.1\n    prot: 2222\n")
    r = _cli(isolated, "status", "somejob", "--host", "box")
    assert r.returncode == 2, r.stdout + r.stderr
    said = " ".join(r.stderr.split())  # the message may wrap
    assert "host 'box' has an unknown setting 'prot' (did you mean 'port'?)" in said and "Traceback" not in said, said


def test_host_set_ssh_tries_the_address_before_saving(ssh_host: str, sshd, tmp_path: Path) -> None:
    from gpujob.config.hosts import HostStore
    from tests.conftest import free_port

    closed = free_port()
    r = _cli(tmp_path, "host", "set", ssh_host, "--ssh", f"ssh -p {closed} root@127.0.0.1")
    assert r.returncode == 3, r.stdout + r.stderr
    assert f"the profile '{ssh_host}' was not changed" in " ".join(r.stderr.split()) and "--no-check" in r.stderr
    assert HostStore().get(ssh_host).port == sshd.port
    r = _cli(tmp_path, "host", "set", ssh_host, "--ssh", f"ssh -p {closed} root@127.0.0.1", "--no-check")
    assert r.returncode == 0 and "saved without trying it" in r.stdout, r.stdout + r.stderr
    assert HostStore().get(ssh_host).port == closed
    user = HostStore().get(ssh_host).user
    r = _cli(tmp_path, "host", "set", ssh_host, "--ssh", f"ssh -p {sshd.port} {user}@127.0.0.1")
    assert r.returncode == 0 and "(reached)" in r.stdout, r.stdout + r.stderr


BEST_JOB = """
    import json, os
    import gpujob_runtime as gj
    # the seq-cls template's way: checkpoints by step, the best by eval_accuracy in ckpt/best
    for step, acc in ((10, 0.6), (20, 0.9), (30, 0.7)):
        gj.save({"w": step}, step, rng=False)
        with open(os.environ["GPUJOB_METRICS_FILE"], "a") as f:
            f.write(json.dumps({"step": step, "eval_accuracy": acc, "eval_loss": 1 - acc if step != 30 else 0.01}) + "\\n")
        if step == 20:
            gj.save_best({"w": step}, step, "eval_accuracy", acc)
"""


@pytest.mark.slow  # torch's import in the job
def test_pull_best_takes_the_runtimes_own_best(tmp_path: Path) -> None:
    job = write_job(tmp_path, "bestj", BEST_JOB, "python main.py")
    r = _cli(job.parent, "submit", "job.yaml", "--host", "local", "--json")
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    wait_state("local", job_id, ("succeeded",))
    r = _cli(tmp_path, "pull", job_id, str(tmp_path / "p"), "--best", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["selected"] == "ckpt/best", doc  # best.json's word, not eval_loss's step-30
    assert json.loads((Path(doc["dest"]) / "ckpt" / "best" / "best.json").read_text())["step"] == 20


def test_cost_keeps_ids_whole_and_a_pipe_gets_whole_lines(tmp_path: Path) -> None:
    name = "a-rather-long-job-name-for-cost-tables"
    job = write_job(tmp_path, name, "print('hi')", "python main.py")
    env = {"COLUMNS": "80"}
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", "submit", str(job), "--host", "local"], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO), **env), stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.split()[0]
    assert f"follow: gpujob tail {job_id} -f    status: gpujob status {job_id}" in r.stdout.splitlines()[1], r.stdout
    wait_state("local", job_id, ("succeeded",))
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", "cost"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(REPO), **env), stdin=subprocess.DEVNULL)
    assert r.returncode == 0 and job_id in r.stdout.split(), r.stdout
    assert "price_per_hour" not in r.stdout  # local has no meter: no cell nor note asks for its price


def test_gc_frees_data_no_kept_job_uses(tmp_path: Path) -> None:
    job = write_job(tmp_path, "dat", "print(open('/dev/null').read())", "python main.py",
                    data=[{"src": "corpus", "dst": "corpus"}])
    (job.parent / "corpus").mkdir()
    (job.parent / "corpus" / "train.jsonl").write_text('{"x": 1}\n' * 1000)
    r = _cli(job.parent, "submit", "job.yaml", "--host", "local", "--json")
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    wait_state("local", job_id, ("succeeded",))
    root = tmp_path / "local-root"
    data = root / "projects" / "dat" / "data" / "corpus"  # the project's staging; the job reads its own view
    view = root / "jobs" / job_id / "data" / "corpus" / "train.jsonl"
    assert data.is_dir() and view.stat().st_ino == (data / "train.jsonl").stat().st_ino
    blobs = [p for p in (root / "store").glob("*/*") if not p.name.startswith(".")]
    assert [b.stat().st_ino for b in blobs] == [view.stat().st_ino]  # one file, one blob, one copy on disk
    r = _cli(tmp_path, "gc", "local", "--older-than", "1h", "--dry-run", "--json")  # the job is recent: kept, and its data
    assert r.returncode == 0 and not [i for i in json.loads(r.stdout)["items"] if i["kind"] == "data"], r.stdout
    r = _cli(tmp_path, "gc", "local", "--older-than", "0s", "--dry-run", "--json")
    items = json.loads(r.stdout)["items"]
    assert {"kind": "data", "path": str(blobs[0])} in [{k: i[k] for k in ("kind", "path")} for i in items], items
    assert blobs[0].is_file()  # a dry run
    r = _cli(tmp_path, "gc", "local", "--older-than", "0s")
    assert r.returncode == 0 and f"data {blobs[0]}" in " ".join(r.stdout.split()), r.stdout
    assert not blobs[0].exists() and not data.exists()


def test_status_and_ls_step_agree_with_the_logs_last_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the collector reads the log once at start and then not for an hour: status reads the rest itself
    monkeypatch.setenv("GPUJOB_METRICS_EVERY", "3600")
    release = tmp_path / "release"
    job = write_job(tmp_path, "steps", f"""
        import os, time
        for i in range(0, 261, 20):
            print(f"step {{i}} loss {{1 / (i + 1):.4f}}", flush=True)
        while not os.path.exists({str(release)!r}):
            time.sleep(0.05)
    """, "python main.py")
    r = _cli(tmp_path, "submit", str(job), "--host", "local", "--json")
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    log = tmp_path / "local-root" / "jobs" / job_id / "output.log"
    try:
        wait_for(lambda: log.is_file() and "step 260 loss" in log.read_text(), 60, "the last step line")
        r = _cli(tmp_path, "status", job_id, "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["latest_metrics"]["step"] == 260, r.stdout
        r = _cli(tmp_path, "status", job_id)
        assert r.returncode == 0 and "step 260" in r.stdout, r.stdout
        r = _cli(tmp_path, "ls", "--host", "local", "--json")  # ls agrees (it showed the collector's step)
        assert r.returncode == 0, r.stderr
        [row] = [j for j in json.loads(r.stdout)["jobs"] if j["job_id"] == job_id]
        assert row["last_metrics"]["step"] == 260, row
    finally:
        release.write_text("")
    wait_state("local", job_id, ("succeeded",))
