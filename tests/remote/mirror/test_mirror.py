"""checkpoint.mirror end to end: real jobs, real rclone, a real S3 server (``rclone serve s3``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, Sshd, run_cli
from tests.faults.linkproxy import LinkProxy
from tests.gpujob.usecases import test_move
from tests.gpujob.usecases.test_move import kill_instance
from tests.helpers import remote_root, wait_for, wait_state
from tests.mirror_lab import S3, TRAIN, s3_server
from tests.remote.run.test_events import Hook

two_hosts = test_move.two_hosts  # the fixture: hosts a and b, their own sshd and root each


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[S3]:
    with s3_server(tmp_path) as server:
        yield server


def mirror_job(tmp_path: Path, name: str, mirror: object, **extra: object) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "main.py").write_text(TRAIN)
    spec = {"name": name, "run": "python main.py", "checkpoint": {"keep": 2, "mirror": mirror}, **extra}
    (d / "job.yaml").write_text(json.dumps(spec))
    return d / "job.yaml"


def argv_with(text: str) -> list[str]:
    """Command lines of this machine's processes that hold ``text``."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            cmd = (d / "cmdline").read_bytes() if d.name.isdigit() else b""
        except OSError:
            continue
        if text.encode() in cmd:
            found.append(cmd.replace(b"\0", b" ").decode(errors="replace")[:200])
    return found


def markers(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / ".complete").glob("*.json")) if (folder / ".complete").is_dir() else []


def test_each_complete_checkpoint_reaches_a_path_and_an_s3_mirror_before_shutdown(s3: S3, ssh_host: str, tmp_path: Path) -> None:
    log = tmp_path / "shutdown.log"
    stand_in = tmp_path / "fake-shutdown"
    stand_in.write_text(f'#!/bin/sh\necho "$(date +%s.%N) shutdown" >> {log}\n')
    stand_in.chmod(0o755)
    assert run_cli("host", "set", ssh_host, "--shutdown-command", str(stand_in)).returncode == 0
    fs = tmp_path / "autodl-fs"
    job = mirror_job(tmp_path, "mirrored", {"to": [str(fs), "s3://ckpts/runs"], "endpoint": s3.url, "keep": 2,
                                            "bwlimit": "2M"},
                     secrets=["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"], autostop={"after": "shutdown"},
                     env={"STEPS": "9", "EVERY": "3", "SIZE": str(1 << 20)})
    r = run_cli("submit", str(job), "--host", ssh_host, "--json", env_extra=s3.env())
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    root = remote_root(tmp_path, ssh_host)
    wait_state(ssh_host, job_id, ("succeeded",), 120, root=root)
    wait_for(log.exists, 60, "the shutdown command")
    off = float(log.read_text().split()[0])
    st = json.loads(run_cli("status", job_id, "--host", ssh_host, "--json").stdout)
    # the supervisor waited for its last checkpoint: both targets hold it, marker written last
    for folder in (fs / job_id, s3.root / "ckpts" / "runs" / job_id):
        assert markers(folder) == ["checkpoint-6.json", "checkpoint-9.json"], folder  # keep: 2 on the mirror
        assert (folder / "checkpoint-9" / "weights.bin").read_bytes() == \
            (root / "jobs" / job_id / "ckpt" / "checkpoint-9" / "weights.bin").read_bytes()
        assert not (folder / "checkpoint-3").exists()
        # the power went off only after the last checkpoint was verified and marked on every target
        assert json.loads((folder / ".complete" / "checkpoint-9.json").read_text())["mirrored_at"] < off
    m = st["mirror"]
    assert [t["mirrored"] for t in m["targets"]] == ["checkpoint-9", "checkpoint-9"]
    assert m["lag_s"] == 0 and not any(t["error"] for t in m["targets"])
    shown = run_cli("status", job_id, "--host", ssh_host).stdout
    assert "mirrored checkpoint-9" in shown
    # the store's keys: only in the job's 0600 secrets file, in no argv, log or other file
    for p in list(root.rglob("*")) + list(tmp_path.glob("state/**/*")):
        if p.is_file() and p.name != "secrets.json":
            data = p.read_bytes()
            assert s3.secret.encode() not in data and s3.key_id.encode() not in data, p
    secrets_file = root / "jobs" / job_id / "secrets.json"
    assert oct(secrets_file.stat().st_mode & 0o777) == "0o600"


@pytest.mark.slow
def test_a_destroyed_instance_resumes_on_another_host_from_the_mirror(
        s3: S3, two_hosts: tuple[Sshd, Sshd], tmp_path: Path) -> None:
    job = mirror_job(tmp_path, "phoenix", "s3://ckpts/p", secrets=["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
                     env={"STEPS": "24", "EVERY": "3", "STEP_S": "0.25"})
    spec = json.loads(job.read_text())
    spec["checkpoint"]["mirror"] = {"to": "s3://ckpts/p", "endpoint": s3.url}
    job.write_text(json.dumps(spec))
    r = run_cli("submit", str(job), "--host", "a", "--json", env_extra=s3.env())
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    old_dir, new_dir = tmp_path / "root-a" / "jobs" / job_id, tmp_path / "root-b" / "jobs" / job_id
    on_mirror = s3.root / "ckpts" / "p" / job_id
    wait_for(lambda: len(markers(on_mirror)) >= 2, 90, "two mirrored checkpoints")
    kill_instance(two_hosts[0], old_dir)
    shutil.rmtree(tmp_path / "root-a")  # the instance and its disk are gone
    newest = max(int(m.split("-")[1].split(".")[0]) for m in markers(on_mirror))
    # a torn upload on the mirror (files, no marker) is never what comes back
    torn = on_mirror / f"checkpoint-{newest + 3}"
    torn.mkdir(exist_ok=True)  # the instance may have died in the middle of this very upload
    (torn / "trainer_state.json").write_text(json.dumps({"global_step": newest + 3}))
    r = run_cli("resume", job_id, "--host", "b", "--json", timeout=300, env_extra=s3.env())
    assert r.returncode == 0, r.stderr + r.stdout
    res = json.loads(r.stdout)
    assert res["source"] == "mirror" and res["checkpoint"] == f"ckpt/checkpoint-{newest}", res
    st = wait_state("b", job_id, ("succeeded", "failed"), 120)
    assert st["state"] == "succeeded", st
    assert f"start at {newest}" in (new_dir / "output.log").read_text()
    steps = [json.loads(x)["step"] for x in (new_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps[-(24 - newest):] == list(range(newest + 1, 25))  # the metric steps go on
    wait_for(lambda: '"mirror_done"' in (new_dir / "events.jsonl").read_text(), 60, "b's last upload")
    # the laptop reads the mirror with both hosts' copies out of the way too
    r = run_cli("pull", job_id, str(tmp_path / "pulls"), "--latest", "--from", "mirror", "--json",
                env_extra=s3.env())
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["selected"] == "ckpt/checkpoint-24"
    assert json.loads((tmp_path / "pulls" / job_id / "ckpt" / "checkpoint-24" / "trainer_state.json")
                      .read_text())["global_step"] == 24


def test_a_cut_mirror_link_resumes_without_resending_verified_files_and_alerts(
        s3: S3, hook: Hook, tmp_path: Path) -> None:
    link = LinkProxy(int(s3.url.rsplit(":", 1)[1]), rate=3 << 20)
    try:
        job = mirror_job(tmp_path, "cutlink", {"to": "s3://ckpts/c", "endpoint": f"http://127.0.0.1:{link.port}",
                                               "alert_after": "1s"},
                         secrets=["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
                         notify={"on": ["mirror_failing"], "channels": [{"type": "webhook", "url": hook.url}]},
                         env={"STEPS": "3", "EVERY": "3", "SHARDS": "6", "SIZE": str(1 << 20)})
        r = run_cli("submit", str(job), "--host", "local", "--json", env_extra=s3.env())
        assert r.returncode == 0, r.stderr
        job_id = json.loads(r.stdout)["job_id"]
        up = s3.root / "ckpts" / "c" / job_id / "checkpoint-3"
        wait_for(lambda: (up / "shard-1.bin").exists() and (up / "shard-2.bin").exists(), 60, "two files up")
        link.cut()
        first = {p.name: p.stat().st_ino for p in up.glob("*.bin")}
        seen: set[str] = set()

        def alerted() -> bool:  # meanwhile, every argv on the machine is read for the keys (rclone retries)
            seen.update(argv_with(s3.secret) + argv_with(s3.key_id))
            return any(g["body"].get("event") == "mirror_failing" for g in hook.got)

        wait_for(alerted, 60, "the alert")
        assert not seen, seen
        assert markers(up.parent) == []  # a torn upload is no checkpoint
        shown = run_cli("status", job_id, "--host", "local").stdout
        assert "failing for" in shown, shown
        link.resume()
        wait_for(lambda: markers(up.parent) == ["checkpoint-3.json"], 60, "the marker after the link came back")
        # the files that were up before the cut were not sent again (same inode on the server's disk)
        assert {n: (up / n).stat().st_ino for n in first} == first
        local = remote_root(tmp_path, "local") / "jobs" / job_id / "ckpt" / "checkpoint-3"
        assert all((up / p.name).read_bytes() == p.read_bytes() for p in local.iterdir())
        alert = next(g for g in hook.got if g["body"].get("event") == "mirror_failing")
        assert "only on the instance since" in json.dumps(alert["body"])
        assert s3.secret not in json.dumps(alert["body"])
    finally:
        link.close()


@pytest.mark.slow
def test_pull_follow_keeps_each_new_checkpoint_through_a_dropped_link(sshd: Sshd, ssh_host: str,
                                                                      tmp_path: Path) -> None:
    from gpujob.config.hosts import HostStore

    link = LinkProxy(sshd.port)
    store = HostStore()
    host = store.get(ssh_host)
    host.port = link.port
    store.save(host)
    try:
        d = tmp_path / "followed"
        d.mkdir()
        (d / "main.py").write_text(TRAIN)
        (d / "job.yaml").write_text(json.dumps({"name": "followed", "run": "python main.py",
                                                "env": {"STEPS": "21", "EVERY": "3", "STEP_S": "0.3", "SIZE": "200000"}}))
        job_id = json.loads(run_cli("submit", str(d / "job.yaml"), "--host", ssh_host, "--json").stdout)["job_id"]
        dest = tmp_path / "follow"
        env = {"GPUJOB_MUX": "0", "GPUJOB_CONNECT_RETRIES": "1"}
        p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "pull", job_id, str(dest), "--follow", "0.5",
                              "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=str(REPO), **env))
        try:
            here = dest / job_id / "ckpt"
            wait_for(lambda: any(here.glob("checkpoint-*")), 30, "a first checkpoint here")
            first = min(int(c.name.split("-")[1]) for c in here.glob("checkpoint-*"))
            link.cut()  # the laptop's link drops while the job goes on
            there = tmp_path / "remote-root" / "jobs" / job_id / "ckpt" / f"checkpoint-{min(first + 6, 21)}"
            wait_for(there.is_dir, 60, "two more checkpoints on the host")
            link.resume()
            out, err = p.communicate(timeout=120)
        finally:
            p.kill()
        assert p.returncode == 0, err + out  # with --json the error is the document on stdout
        res = json.loads(out)
        assert res["state"] == "succeeded" and res["pulled"][-1] == "ckpt/checkpoint-21", res
        steps = [int(s.rsplit("-", 1)[1]) for s in res["pulled"]]
        assert steps == sorted(steps)
        assert (here / f"checkpoint-{first}").is_dir()  # what came before the cut stays
        assert (dest / job_id / "ckpt" / "checkpoint-21" / "trainer_state.json").is_file()
        # a second run into the same folder fetches no checkpoint again (only the grown event log)
        r = run_cli("pull", job_id, str(dest), "--follow", "0.5", "--json", env_extra=env)
        assert r.returncode == 0 and json.loads(r.stdout)["bytes"] < 20000, r.stderr + r.stdout
    finally:
        link.close()


def test_a_wrong_mirror_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    job = mirror_job(tmp_path, "badmirror", {"to": ["ckpts/here", "http://x/y"], "bwlimit": "fast", "kep": 2})
    r = run_cli("submit", str(job), "--host", "local")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    for said in ("relative path would land inside", "only s3:// is spelled as a URL", "bwlimit: expected a rate",
                 "unknown key 'kep'", "nothing was sent"):
        assert said in r.stderr, r.stderr
    r = run_cli("pull", "nosuchjob", str(tmp_path / "p"), "--from", "mirror")
    assert r.returncode != 0 and "Traceback" not in r.stderr and "checkpoint.mirror" in r.stderr, r.stderr


def test_status_draws_the_mirror_as_the_issue_asks() -> None:
    from gpujob.ui.mirror import mirror_lines

    now = 1_000_000.0
    lines = mirror_lines({"targets": [
        {"target": "s3://b/ck", "mirrored": "checkpoint-400", "mirrored_at": now - 130,
         "uploading": {"name": "checkpoint-500", "percent": 43}, "error": None},
        {"target": "/root/autodl-fs/ck", "mirrored": None, "uploading": None, "error": "connection refused",
         "failing_since": now - 600}], "lag_s": 95}, now)
    assert lines[0].startswith("mirrored checkpoint-400 (2 min ago) · uploading checkpoint-500 43 %")
    assert "failing for 10m" in lines[1] and "connection refused" in lines[1]
    assert lines[2].startswith("lag 1m")


def test_the_dashboards_job_page_gets_the_mirror_per_checkpoint_and_as_status_says_it() -> None:
    from gpujob.ui.mirror import mark_mirror

    now = 1_000_000.0
    doc = mark_mirror({"now": now, "checkpoints": [{"name": "checkpoint-300"}, {"name": "checkpoint-400"},
                                                    {"name": "checkpoint-500"}],
                       "mirror": {"targets": [{"target": "s3://b/[red]ck", "mirrored": "checkpoint-400",
                                               "mirrored_at": now - 130,
                                               "uploading": {"name": "checkpoint-500", "percent": 43}}]}})
    assert [c.get("mirror") for c in doc["checkpoints"]] == [None, "✓ mirrored", "uploading 43 %"]
    # plain text for the page: the target's own brackets kept as written, no markup left
    assert doc["mirror_lines"] == ["mirrored checkpoint-400 (2 min ago) · uploading checkpoint-500 43 %"
                                   "  → s3://b/[red]ck"]


def test_the_copy_verifies_each_file_by_hash_so_no_second_read_and_a_gap_falls_back_to_check(
        s3: S3, tmp_path: Path) -> None:
    from remote.mirror import engine

    src = tmp_path / "checkpoint-7"
    (src / "sub").mkdir(parents=True)
    for rel, size in (("weights.bin", 3 << 20), ("trainer_state.json", 20), ("sub/opt.pt", 1 << 20)):
        (src / rel).write_bytes(os.urandom(size))
    target = "s3://ckpts/v"
    env = engine.env_for(target, {"endpoint": s3.url}, s3.env(), dict(os.environ))
    rc = engine.Rclone(shutil.which("rclone") or "rclone", env)
    dst = engine.dest(target, "job") + "/checkpoint-7"
    verified = rc.copy(str(src), dst, False, lambda s: None)
    # every file's hash was compared with the store's after its transfer: nothing left to re-read
    assert verified == {"weights.bin", "trainer_state.json", "sub/opt.pt"}
    files = engine.local_files(str(src), False)
    assert rc.verify(str(src), dst, False, verified, files) is False
    # one file that rclone did not vouch for is checked by a second read, which finds a bad copy
    served = s3.root / "ckpts" / "v" / "job" / "checkpoint-7" / "sub" / "opt.pt"
    served.write_bytes(os.urandom(1 << 20))
    with pytest.raises(engine.MirrorError):
        rc.verify(str(src), dst, False, verified - {"sub/opt.pt"}, files)
    # the next copy sends it again (hashes differ) and vouches for it; a single file the same way
    assert "sub/opt.pt" in rc.copy(str(src), dst, False, lambda s: None)
    assert served.read_bytes() == (src / "sub" / "opt.pt").read_bytes()
    one = rc.copy(str(src / "weights.bin"), dst + "-single/weights.bin", True, lambda s: None)
    assert rc.verify(str(src / "weights.bin"), dst + "-single/weights.bin", True, one, ["weights.bin"]) is False
    # and back (pull, restore): what arrives is vouched for the same way
    back = tmp_path / "back"
    got = rc.copy(dst, str(back), False, lambda s: None)
    assert rc.verify(dst, str(back), False, got, engine.local_files(str(back), False)) is False
    assert (back / "sub" / "opt.pt").read_bytes() == (src / "sub" / "opt.pt").read_bytes()
