"""checkpoint.mirror end to end: real jobs, real rclone, a real S3 server (``rclone serve s3``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import run_cli
from tests.helpers import remote_root, wait_for, wait_state
from tests.mirror_lab import S3, TRAIN, s3  # noqa: F401  (the fixture)


def mirror_job(tmp_path: Path, name: str, mirror: object, **extra: object) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "main.py").write_text(TRAIN)
    spec = {"name": name, "run": "python main.py", "checkpoint": {"keep": 2, "mirror": mirror}, **extra}
    (d / "job.yaml").write_text(json.dumps(spec))
    return d / "job.yaml"


def markers(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / ".complete").glob("*.json")) if (folder / ".complete").is_dir() else []


def test_each_complete_checkpoint_reaches_a_path_and_an_s3_mirror(s3: S3, tmp_path: Path) -> None:
    fs = tmp_path / "autodl-fs"
    job = mirror_job(tmp_path, "mirrored", {"to": [str(fs), "s3://ckpts/runs"], "endpoint": s3.url, "keep": 2},
                     secrets=["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"], env={"STEPS": "9", "EVERY": "3"})
    r = run_cli("submit", str(job), "--host", "local", "--json", env_extra=s3.env())
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    root = remote_root(tmp_path, "local")
    wait_state("local", job_id, ("succeeded",), 120, root=root)
    events = root / "jobs" / job_id / "events.jsonl"
    wait_for(lambda: '"mirror_done"' in events.read_text(), 60, "the mirror's end")
    st = json.loads(run_cli("status", job_id, "--host", "local", "--json").stdout)
    # the supervisor waited for its last checkpoint: both targets hold it, marker written last
    for folder in (fs / job_id, s3.root / "ckpts" / "runs" / job_id):
        assert markers(folder) == ["checkpoint-6.json", "checkpoint-9.json"], folder  # keep: 2 on the mirror
        assert (folder / "checkpoint-9" / "weights.bin").read_bytes() == \
            (root / "jobs" / job_id / "ckpt" / "checkpoint-9" / "weights.bin").read_bytes()
        assert not (folder / "checkpoint-3").exists()
    m = st["mirror"]
    assert [t["mirrored"] for t in m["targets"]] == ["checkpoint-9", "checkpoint-9"]
    assert m["lag_s"] == 0 and not any(t["error"] for t in m["targets"])
    shown = run_cli("status", job_id, "--host", "local").stdout
    assert "mirrored checkpoint-9" in shown
    # the store's keys: only in the job's 0600 secrets file, in no argv, log or other file
    for p in list(root.rglob("*")) + list(tmp_path.glob("state/**/*")):
        if p.is_file() and p.name != "secrets.json":
            data = p.read_bytes()
            assert s3.secret.encode() not in data and s3.key_id.encode() not in data, p
    secrets_file = root / "jobs" / job_id / "secrets.json"
    assert oct(secrets_file.stat().st_mode & 0o777) == "0o600"
