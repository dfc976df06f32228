"""A job's ``data:`` for its whole life (remote/data/datastore.py, docs/job-spec.md#where-data-lives): two
projects whose ``data:`` has the same ``dst:`` and different bytes, running at once on one host over
a real sshd, each read their own bytes from start to end, while a third submit changes one
project's data under its running job; identical bytes are sent once (in one project, and
across projects under one ``dst:``) and stored once; ``gc`` keeps
the blobs of running jobs and frees them once no job is left."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.byo_helpers import job_dir, log_text
from tests.conftest import run_cli
from tests.helpers import submit, wait_for, wait_state, write_job

# reads its data file at every step until the test opens the gate; prints each distinct content seen
READER = """
    import os, sys, time
    path = os.path.join(os.environ["GPUJOB_DATA_DIR"], "corpus.txt")
    seen = []
    n = 0
    while True:
        with open(path) as f:
            text = f.read().strip()
        if text not in seen:
            seen.append(text)
            print("data", text, flush=True)
        n += 1
        if n == 3:
            print("reading", flush=True)
        if os.path.exists(sys.argv[1]) and n > 3:
            break
        time.sleep(0.05)
    print("seen", ",".join(seen), "steps", n, flush=True)
"""


def _project(tmp_path: Path, name: str, text: str, gate: Path, folder: str | None = None) -> Path:
    job = write_job(tmp_path, folder or name, READER, f"python main.py {gate}", env={"OMP_NUM_THREADS": "1"})
    spec = json.loads(job.read_text())
    spec["name"] = name
    src = tmp_path / f"{name}-corpus.txt"  # beside the project, not in its code
    src.write_text(text + "\n")
    spec["data"] = [{"src": str(src), "dst": "corpus.txt"}]
    job.write_text(json.dumps(spec))
    return job


def _blobs(root: Path) -> list[Path]:
    store = root / "store"
    return sorted(p for p in store.glob("*/*") if not p.name.startswith(".")) if store.is_dir() else []


def _sent(res: dict) -> int:
    return int(res["sync"]["files_sent"])


def test_two_projects_with_one_dst_each_read_their_own_bytes_while_both_run(ssh_host: str, tmp_path: Path) -> None:
    root = tmp_path / "remote-root"
    gate = tmp_path / "gate"
    a = _project(tmp_path, "dsa", "dataset-A", gate)
    b = _project(tmp_path, "dsb", "dataset-B", gate)
    ja = submit(ssh_host, a)["job_id"]
    wait_for(lambda: "reading" in log_text(job_dir(tmp_path, ssh_host, ja)), 90, "job A to read its data")
    jb = submit(ssh_host, b)["job_id"]  # same dst, other bytes, same host: A goes on reading A's
    wait_for(lambda: "reading" in log_text(job_dir(tmp_path, ssh_host, jb)), 90, "job B to read its data")

    # project A's data changes and is submitted again while its first job runs: that job keeps its bytes
    (tmp_path / "dsa-corpus.txt").write_text("dataset-A2\n")
    a2 = submit(ssh_host, a)
    assert _sent(a2) == 1, a2["sync"]  # the new bytes only
    wait_for(lambda: "reading" in log_text(job_dir(tmp_path, ssh_host, a2["job_id"])), 90, "job A2 to read")

    # identical bytes: a submit of the same data sends nothing, another project's copy is stored once
    again = submit(ssh_host, a)
    assert _sent(again) == 0, again["sync"]
    same = _project(tmp_path, "dsc", "dataset-B", gate)
    c = submit(ssh_host, same)
    assert _sent(c) == 2, c["sync"]  # its code (main.py, job.yaml) only: B's bytes under that dst were there
    jc = c["job_id"]
    views = {j: job_dir(tmp_path, ssh_host, j) / "data" / "corpus.txt" for j in (ja, jb, a2["job_id"], jc)}
    assert views[jb].stat().st_ino == views[jc].stat().st_ino  # one inode for B's and C's bytes
    assert len(_blobs(root)) == 3, _blobs(root)  # A, A2, B: three contents, three blobs
    assert not any(os.stat(p).st_mode & 0o222 for p in _blobs(root))  # blobs are not for writing

    # gc while they run: nothing a live job reads goes
    r = run_cli("gc", ssh_host, "--older-than", "0s", "--json")
    assert r.returncode == 0, r.stderr
    assert len(_blobs(root)) == 3

    gate.write_text("go")
    for j in (ja, jb, a2["job_id"], again["job_id"], jc):
        assert wait_state(ssh_host, j, ("succeeded", "failed"), 90)["state"] == "succeeded", log_text(job_dir(tmp_path, ssh_host, j))
    seen = {j: log_text(job_dir(tmp_path, ssh_host, j)).split("seen ")[-1].split(" steps")[0]
            for j in (ja, jb, a2["job_id"], jc)}
    assert seen == {ja: "dataset-A", jb: "dataset-B", a2["job_id"]: "dataset-A2", jc: "dataset-B"}, seen

    # once no job refers to them, gc frees every blob (and the projects' staged copies)
    r = run_cli("gc", ssh_host, "--older-than", "0s", "--json")
    assert r.returncode == 0, r.stderr
    assert _blobs(root) == [], _blobs(root)
    kinds = [i["kind"] for i in json.loads(r.stdout)["items"]]
    assert kinds.count("data") >= 3, kinds
    assert not any(p.is_file() for p in (root / "projects").rglob("corpus.txt"))
