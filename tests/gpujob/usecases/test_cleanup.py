"""``gpujob rm`` and ``gpujob gc``: a host's disk given back, never a queued or running job's."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import run_cli
from tests.helpers import job_processes, submit, wait_state, write_job

WRITE_CKPT = 'mkdir -p "$GPUJOB_CKPT_DIR/checkpoint-1" && head -c 300000 /dev/urandom > "$GPUJOB_CKPT_DIR/checkpoint-1/w.bin"'


def known_jobs() -> list[str]:
    return run_cli("completion", "--words", "jobs").stdout.split()


def test_rm_refuses_a_running_job_unless_forced(any_host: str, tmp_path: Path) -> None:
    root = Path(os.environ["GPUJOB_LOCAL_ROOT"]) if any_host == "local" else tmp_path / "remote-root"
    long = submit(any_host, write_job(tmp_path, "long", "", "sleep 300"))["job_id"]
    done = submit(any_host, write_job(tmp_path, "done", "", WRITE_CKPT))["job_id"]
    wait_state(any_host, long, ("running",))
    wait_state(any_host, done, ("succeeded",))
    r = run_cli("rm", long)
    assert r.returncode == 2 and "stop it first" in r.stderr and "--force" in r.stderr, r.stderr
    assert (root / "jobs" / long).is_dir() and job_processes(long)
    r = run_cli("rm", long, done)  # one refused: the other is still removed, and the error says both
    assert r.returncode == 2 and "1 of 2 jobs not removed" in r.stderr and f"removed: {done}" in r.stderr, r.stderr
    assert (root / "jobs" / long).is_dir() and not (root / "jobs" / done).exists()
    done = submit(any_host, write_job(tmp_path, "done2", "", WRITE_CKPT))["job_id"]
    wait_state(any_host, done, ("succeeded",))
    r = run_cli("rm", done, long, "--force", "--json")
    assert r.returncode == 0, r.stderr
    res = {x["job_id"]: x for x in json.loads(r.stdout)["removed"]}
    assert res[long]["stopped"] is True and res[done]["stopped"] is False
    assert res[done]["bytes"] >= 300000
    assert not (root / "jobs" / long).exists() and not (root / "jobs" / done).exists()
    assert not job_processes(long)
    assert long not in known_jobs() and done not in known_jobs()
    r = run_cli("rm", done)
    assert r.returncode == 2 and "no job matches" in r.stderr


def test_gc_dry_run_then_frees_all_but_what_runs(tmp_path: Path) -> None:
    root = Path(os.environ["GPUJOB_LOCAL_ROOT"])
    old = submit("local", write_job(tmp_path, "old", "", WRITE_CKPT, setup="echo setup-old"))["job_id"]
    wait_state("local", old, ("succeeded",))
    busy = submit("local", write_job(tmp_path, "busy", "", "sleep 300", setup="echo setup-busy"))["job_id"]
    wait_state("local", busy, ("running",))
    stale = root / "agent" / "0.0.0-stale"
    stale.mkdir(parents=True)
    (stale / "x.py").write_bytes(b"x" * 5000)
    os.utime(stale, (1, 1))
    current = {p.name for p in (root / "agent").iterdir()} - {stale.name}
    envs_before = sorted(p.name for p in (root / "envs").iterdir())
    assert len([e for e in envs_before if e.endswith(".ok")]) == 2

    recent = json.loads(run_cli("gc", "--older-than", "1d", "--dry-run", "--json").stdout)["items"]
    assert [(i["kind"], Path(i["path"]).name) for i in recent] == [("agent", "0.0.0-stale")]  # the rest is recent
    r = run_cli("gc", "--older-than", "0s", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    kinds = {(i["kind"], i.get("job_id") or Path(i["path"]).name) for i in doc["items"]}
    assert ("job", old) in kinds and ("agent", "0.0.0-stale") in kinds and ("project", "old") in kinds
    assert not any(i.get("job_id") == busy for i in doc["items"]) and ("project", "busy") not in kinds
    assert [k for k in kinds if k[0] == "env"] and all(Path(i["path"]).exists() for i in doc["items"])
    assert doc["bytes"] >= 300000 and doc["busy"] == [busy] and doc["dry_run"] is True
    human = run_cli("gc", "--older-than", "0s", "--dry-run").stdout
    assert "would free" in human and "0.0.0-stale" in human
    from gpujob.ui.report import human_bytes

    shared = doc["bytes"] - sum(i["bytes"] for i in doc["items"])  # old's code snapshot links its project's files
    assert shared > 0 and f"{human_bytes(shared):>9}  shared by the items above" in human, human  # lines add up

    r = run_cli("gc", "--older-than", "0s")
    assert r.returncode == 0 and "freed" in r.stdout, r.stderr
    assert not (root / "jobs" / old).exists() and not stale.exists() and not (root / "projects" / "old").exists()
    assert (root / "jobs" / busy).is_dir() and current <= {p.name for p in (root / "agent").iterdir()}
    assert len([e for e in (root / "envs").iterdir() if e.name.endswith(".ok")]) == 1  # busy's stays
    assert wait_state("local", busy, ("running",))["state"] == "running"
    assert old not in known_jobs() and busy in known_jobs()
    run_cli("stop", busy)


def test_gc_frees_a_job_that_moved_to_another_host(tmp_path: Path) -> None:
    """A job that went on elsewhere is history here: gc frees it like a finished one."""
    import time

    from remote.core.layout import Root
    from remote.verbs import cleanup

    root = Root(str(tmp_path / "r"))
    job_id = "moved-0101-x0001"
    d = root.jobs / job_id
    d.mkdir(parents=True)
    t = time.time() - 100_000
    (d / "status.json").write_text(json.dumps({"job_id": job_id, "name": "m", "state": "moved", "moved_to": "b",
                                               "submitted_at": t, "ended_at": t + 1}))
    (d / "spec.json").write_text(json.dumps({"name": "m", "run": "true"}))
    items = cleanup.plan(root, 3600.0)["items"]
    assert {"kind": "job", "job_id": job_id} in [{"kind": i["kind"], "job_id": i.get("job_id")} for i in items]
    cleanup.gc(root, 3600.0)
    assert not d.exists()
