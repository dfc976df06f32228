"""The run ledger as a job's memory (gpujob/config/remembered.py, docs/move.md): a job its host no
longer has, after ``gpujob rm`` or with the instance wiped while its sshd still answers, is pulled
from and resumed on another host from its mirror (real jobs, real rclone, ``rclone serve s3``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Sshd, run_cli
from tests.gpujob.usecases import test_move
from tests.gpujob.usecases.test_move import job_processes
from tests.helpers import wait_for, wait_state
from tests.mirror_lab import S3, s3_server
from tests.remote.mirror.test_mirror import markers, mirror_job

two_hosts = test_move.two_hosts  # the fixture: hosts a and b, their own sshd and root each


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[S3]:
    with s3_server(tmp_path) as server:
        yield server


def _mirrored_job(tmp_path: Path, s3: S3, name: str) -> tuple[str, Path]:
    """A job on host ``a`` mirroring to S3, once two complete checkpoints are on the mirror."""
    job = mirror_job(tmp_path, name, {"to": "s3://ckpts/m", "endpoint": s3.url},
                     secrets=["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
                     env={"STEPS": "30", "EVERY": "3", "STEP_S": "0.3"})
    r = run_cli("submit", str(job), "--host", "a", "--json", env_extra=s3.env())
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    on_mirror = s3.root / "ckpts" / "m" / job_id
    wait_for(lambda: len(markers(on_mirror)) >= 2, 120, "two mirrored checkpoints")
    return job_id, on_mirror


def _newest(on_mirror: Path) -> int:
    return max(int(m.split("-")[1].split(".")[0]) for m in markers(on_mirror))


def _resumed_on_b(tmp_path: Path, s3: S3, job_id: str, on_mirror: Path) -> None:
    newest = _newest(on_mirror)
    r = run_cli("resume", job_id, "--host", "b", "--json", timeout=300, env_extra=s3.env())
    assert r.returncode == 0, r.stderr + r.stdout
    res = json.loads(r.stdout)
    assert res["source"] == "mirror" and res["from"] == "a" and res["to"] == "b", res
    assert "no longer has it" in (res["old_unreachable"] or ""), res  # it answered: the job was what it lacked
    got = int(res["checkpoint"].rsplit("-", 1)[1])
    assert got >= newest, res  # the newest the mirror held (the job may have mirrored one more before it ended)
    st = wait_state("b", job_id, ("succeeded", "failed"), 180)
    assert st["state"] == "succeeded", st
    new_dir = tmp_path / "root-b" / "jobs" / job_id
    assert f"start at {got}" in (new_dir / "output.log").read_text()
    # and the job index knows it on b now: status without --host finds it there
    r = run_cli("status", job_id, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "succeeded", r.stderr


def test_a_job_removed_with_rm_is_pulled_and_resumed_from_its_mirror(
        s3: S3, two_hosts: tuple[Sshd, Sshd], tmp_path: Path) -> None:
    job_id, on_mirror = _mirrored_job(tmp_path, s3, "forgot")
    _stop(tmp_path, job_id)
    r = run_cli("rm", job_id)
    assert r.returncode == 0, r.stderr
    assert "left on its mirror" in r.stdout and f"s3://ckpts/m/{job_id}" in r.stdout, r.stdout  # rm says what stays
    assert not (tmp_path / "root-a" / "jobs" / job_id).exists()
    # status on its host: the remedy leads back to the ledger
    r = run_cli("status", job_id)
    assert r.returncode != 0 and "run ledger remembers" in r.stderr, r.stderr
    # pull --from mirror: the ledger has its mirror (it said "has no checkpoint.mirror")
    r = run_cli("pull", job_id, str(tmp_path / "pulls"), "--latest", "--from", "mirror", "--json",
                env_extra=s3.env())
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["selected"] == f"ckpt/checkpoint-{_newest(on_mirror)}"
    _resumed_on_b(tmp_path, s3, job_id, on_mirror)


def _stop(tmp_path: Path, job_id: str) -> None:
    r = run_cli("stop", job_id, "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    wait_state("a", job_id, ("stopped", "succeeded"), 60)
    wait_for(lambda: '"mirror_done"' in (tmp_path / "root-a" / "jobs" / job_id / "events.jsonl").read_text(), 60,
             "the last upload")


def test_a_removed_job_resumed_on_its_own_host_is_made_again_there_from_its_mirror(
        s3: S3, two_hosts: tuple[Sshd, Sshd], tmp_path: Path) -> None:
    """``resume JOB`` alone, after ``rm`` (or with the instance re-imaged under the same profile): the
    job is made again on the host it was on, from the mirror, under its id (it said "no job matches")."""
    job_id, on_mirror = _mirrored_job(tmp_path, s3, "again")
    _stop(tmp_path, job_id)
    assert run_cli("rm", job_id).returncode == 0
    newest = _newest(on_mirror)
    r = run_cli("resume", job_id, "--json", timeout=300, env_extra=s3.env())
    assert r.returncode == 0, r.stderr + r.stdout
    res = json.loads(r.stdout)
    assert (res["source"], res["from"], res["to"], res["checkpoint"]) == ("mirror", "a", "a", f"ckpt/checkpoint-{newest}"), res
    st = wait_state("a", job_id, ("succeeded", "failed"), 180)
    assert st["state"] == "succeeded", st
    assert f"start at {newest}" in (tmp_path / "root-a" / "jobs" / job_id / "output.log").read_text()


def test_a_job_whose_host_was_wiped_while_it_still_answers_resumes_from_its_mirror(
        s3: S3, two_hosts: tuple[Sshd, Sshd], tmp_path: Path) -> None:
    job_id, on_mirror = _mirrored_job(tmp_path, s3, "wiped")
    root_a = tmp_path / "root-a"
    # the instance re-imaged: every process of gpujob's there (supervisor, job, the kept agent) and its
    # folder gone, while its sshd (the same profile, the same address) answers
    for p in job_processes(job_id) + _processes_naming(str(root_a)):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_for(lambda: not job_processes(job_id) and not _processes_naming(str(root_a)), 20, "its processes gone")
    shutil.rmtree(root_a)
    assert run_cli("host", "disconnect", "a").returncode == 0  # the laptop's kept connection led to the old agent
    _resumed_on_b(tmp_path, s3, job_id, on_mirror)


def _processes_naming(text: str) -> list[int]:
    """Processes of this machine whose command line holds ``text``."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and text.encode() in (d / "cmdline").read_bytes():
                found.append(int(d.name))
        except OSError:
            continue
    return found


def test_the_ledgers_suggestion_names_the_job_asked_about() -> None:
    """``status tiny`` after ``rm`` of tiny's job: the remedy resumes tiny's job, never a newer one whose
    name only starts with or holds ``tiny`` (SQL's LIKE matched "tinyllama-…" and "hf-tiny-…")."""
    from gpujob.config.ledger import open_ledger

    with open_ledger() as lg:
        for i, (job_id, name) in enumerate([("tiny-12070101-aaaaa", "tiny"), ("tinyllama-12070202-bbbbb", "tinyllama"),
                                            ("hf-tiny-12070303-ccccc", "hf-tiny"), ("TINY-12070404-ddddd", "TINY")]):
            lg.put(job_id, name=name, host="local", state="succeeded", submitted_at=1.8e9 + i)
    for ref, meant in (("tiny", "tiny-12070101-aaaaa"), ("bbb", "tinyllama-12070202-bbbbb")):
        r = run_cli("status", ref, "--host", "local")
        assert r.returncode == 2 and f"no job matches {ref!r} on local" in r.stderr, r.stderr
        assert f"gpujob resume {meant} --host HOST" in r.stderr, (ref, r.stderr)
