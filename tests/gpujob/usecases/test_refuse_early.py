"""What cannot run is refused before anything is sent: a run: whose script is not in the project
folder names the scripts there; one that still gets through (a cd in run:) is diagnosed as a missing
script, not "exit code 2, read the traceback"."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli
from tests.helpers import status, submit, wait_state, write_job


def test_a_typo_in_runs_script_is_refused_then_diagnosed(tmp_path: Path) -> None:
    job = write_job(tmp_path, "typo", "print('x')", "python trian.py")
    (job.parent / "train.py").write_text("print('training')\n")
    r = run_cli("submit", str(job), "--host", "local")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "run: trian.py is not in the project folder" in r.stderr and "nothing was submitted" in r.stderr, r.stderr
    assert "did you mean train.py?" in r.stderr and "main.py" in r.stderr, r.stderr
    assert not (tmp_path / "local-root" / "jobs").exists() or not any((tmp_path / "local-root" / "jobs").iterdir())

    job.write_text(job.read_text().replace("python trian.py", "cd . && python trian.py"))
    job_id = submit("local", job)["job_id"]
    wait_state("local", job_id, ("failed",))
    d = status("local", job_id)["diagnosis"]
    assert d["cause"] == "missing_script" and "the script does not exist" in d["summary"], d
    assert "did you mean train.py?" in d["remedy"] and "main.py, train.py" in d["remedy"], d


def test_an_interpreter_not_on_the_job_path_is_refused(tmp_path: Path) -> None:
    job = write_job(tmp_path, "interp", "print('x')", "python3.99 main.py")
    r = run_cli("submit", str(job), "--host", "local")
    assert r.returncode == 2, r.stdout + r.stderr
    said = " ".join(r.stderr.split())
    assert "`python3.99` is not on this host's job PATH" in said and "would exit 127; nothing was submitted" in said, said
    assert "set python:" in said and "Traceback" not in said
    assert not (tmp_path / "local-root" / "jobs").exists() or not any((tmp_path / "local-root" / "jobs").iterdir())
    job.write_text(job.read_text().replace("python3.99", "python"))
    job_id = submit("local", job)["job_id"]  # the same project: its sync lease was given back
    wait_state("local", job_id, ("succeeded",))


def test_a_python_path_that_is_no_interpreter_there_is_refused(tmp_path: Path) -> None:
    """``python:`` naming a path the host lacks (or a file that does not run) is refused at submit, the
    path and the host named; it made a job that failed in its setup. (The agent checks it, over SSH alike.)"""
    any_host, root = "local", tmp_path / "local-root"
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'broken venv' >&2\nexit 3\n")
    broken.chmod(0o755)
    for python, why in (("/opt/nope/bin/python3", "(no such file)"), (str(broken), "does not run on")):
        (tmp_path / python.replace("/", "_")).mkdir()
        job = write_job(tmp_path / python.replace("/", "_"), "py", "print('x')", "python main.py", python=python)
        r = run_cli("submit", str(job), "--host", any_host)
        said = " ".join(r.stderr.split())
        assert r.returncode == 2 and f"python: {python}" in said and f"on {any_host}" in said and why in said, said
        assert "nothing was submitted" in said and "gpujob exec" in said and "Traceback" not in said, said
        assert not (root / "jobs").exists() or not any((root / "jobs").iterdir())
