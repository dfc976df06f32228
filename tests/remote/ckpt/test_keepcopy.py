"""A checkpoint file the script overwrites in place (nanoGPT's ``ckpt.pt``) and a kill in the middle of
its save: gpujob's kept copy of its last complete version is put back before the restart, which goes
on from the save before the cut instead of from step 0 (remote/ckpt/keepcopy.py)."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import run_cli
from tests.helpers import needs, remote_root, submit, wait_for, wait_state, write_job

# nanoGPT's way: one out/ckpt.pt, rewritten every eval interval, read back when it is there (no gpujob
# code; GPUJOB_RESUME only printed). The first attempt's third save is cut in half by a kill -9, as the
# OOM killer or a preemption would cut it; the test opens the gate "go" once gpujob kept the second save.
NANO = """
    import io, os, sys, time, torch
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    path = os.path.join("out", "ckpt.pt")
    os.makedirs("out", exist_ok=True)
    start = 0
    if os.path.exists(path):
        ck = torch.load(path)
        model.load_state_dict(ck["model"])
        start = ck["iter_num"]
    print("GPUJOB_RESUME=" + os.environ.get("GPUJOB_RESUME", ""), flush=True)
    print("start at", start, flush=True)
    for it in range(start + 1, 31):
        model.weight.data += 0.01
        if it % 10:
            continue
        state = {"model": model.state_dict(), "iter_num": it}
        if it == 30 and start == 0:
            buf = io.BytesIO()
            torch.save(state, buf)
            with open(path, "wb") as f:  # torch.save(path) truncates the file, then writes it
                f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
                f.flush()
                os.kill(os.getpid(), 9)
        torch.save(state, path)
        print("saved", it, flush=True)
        if it == 20 and start == 0:
            deadline = time.time() + 120
            while not os.path.exists("go") and time.time() < deadline:
                time.sleep(0.05)
"""


def test_cut_save_in_place_resumes_from_the_kept_copy(tmp_path: Path) -> None:
    needs("torch")
    import torch

    job = write_job(tmp_path, "nano", NANO, "python main.py", checkpoint={"dir": "out"},
                    retry={"max_restarts": 1, "backoff": "0s"})
    job_id = submit("local", job)["job_id"]
    jd = remote_root(tmp_path, "local") / "jobs" / job_id
    kept = jd / "kept" / ".kept.json"
    try:
        wait_for(lambda: kept.exists() and json.loads(kept.read_text()).get("ckpt.pt", {}).get("step") == 20,
                 90, lambda: "the copy of step 20: " + (kept.read_text() if kept.exists() else "none"))
        (jd / "code" / "go").write_text("")
        st = wait_state("local", job_id, ("succeeded", "failed"), 120)
    finally:
        run_cli("stop", job_id, "--host", "local")
    assert st["state"] == "succeeded", st
    a1, a2 = st["attempts"]
    assert a1["reason"] == "signal" and Path(a2["resume"]) == jd / "ckpt" / "ckpt.pt", st["attempts"]
    log = (jd / "output.log").read_text()
    said = "ckpt.pt restored from the copy kept of its last complete version (step 20)"
    assert said in log.split("attempt 2 started")[0], log
    second = log.split("attempt 2 started")[1]
    assert f"GPUJOB_RESUME={jd / 'ckpt' / 'ckpt.pt'}" in second and "start at 20" in second, log
    assert said in st["restored"] and "attempt 2" in st["restored"], st.get("restored")
    human = run_cli("status", job_id, "--host", "local")
    assert "restored" in human.stdout and "ckpt.pt" in human.stdout, human.stdout
    # nothing else changed: the folder holds the one file, now the whole save of step 30; no temporary left
    assert sorted(os.listdir(jd / "code" / "out")) == ["ckpt.pt"]
    assert torch.load(jd / "ckpt" / "ckpt.pt")["iter_num"] == 30
    assert [c["name"] for c in st["checkpoints"]] == ["ckpt.pt"]
    assert sorted(os.listdir(jd / "kept")) == [".kept.json", "ckpt.pt"]
    # the copy is the job's own business: a pull of everything does not bring it
    pulled = json.loads(run_cli("pull", job_id, str(tmp_path / "p"), "--json").stdout)
    assert not (Path(pulled["dest"]) / "kept").exists() and (Path(pulled["dest"]) / "ckpt" / "ckpt.pt").is_file()
    # the job's file cut short after its end (a host's crash): pull --latest brings the kept copy in its place
    whole = (jd / "ckpt" / "ckpt.pt").read_bytes()
    (jd / "ckpt" / "ckpt.pt").write_bytes(whole[: len(whole) // 2])
    step = json.loads(kept.read_text())["ckpt.pt"]["step"]
    r = run_cli("pull", job_id, str(tmp_path / "latest"), "--latest", "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    doc = json.loads(r.stdout)
    assert doc["selected"] == "ckpt/ckpt.pt" and f"kept of its last complete version (step {step})" in doc["note"], doc
    assert torch.load(Path(doc["dest"]) / "ckpt" / "ckpt.pt")["iter_num"] == step


def _torch_like(path: Path, step: int, cut: bool = False) -> None:
    """A zip shaped like torch.save's (a data.pkl naming no storage), whole or cut in half."""
    import pickle

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"iter_num": step, "pad": "x" * 4000}, protocol=2))
        z.writestr("archive/.data/serialization_id", "1")
    data = buf.getvalue()
    path.write_bytes(data[: len(data) // 2] if cut else data)


def test_copy_and_skip_rules(tmp_path: Path) -> None:
    from remote.ckpt import diskbudget, keepcopy

    gb = 1 << 30
    # beside the job's next save, the copy must leave max(2 GB, 10 %) of the disk free
    assert diskbudget.margin(50 * gb) == 5 * gb and diskbudget.margin(10 * gb) == 2 * gb
    job = SimpleNamespace(path=tmp_path / "job")
    ckpt = job.path / "ckpt"
    ckpt.mkdir(parents=True)
    _torch_like(ckpt / "ckpt.pt", 10)
    _torch_like(ckpt / "checkpoint_10.pt", 10)  # a new file per save: never copied
    os.utime(ckpt / "checkpoint_10.pt", (1e9, 1e9))  # older than ckpt.pt
    notes: list[str] = []
    k = keepcopy.Keeper(job, ckpt, None, notes.append)
    todo = k.changed([])
    assert [rel for rel, _, _ in todo] == ["ckpt.pt"]
    k.copy_all(todo)
    assert keepcopy.saved_step(job.path / "kept" / "ckpt.pt") == 10 and k.changed([]) == []  # unchanged: no copy
    _torch_like(ckpt / "ckpt.pt", 20, cut=True)  # cut short: not copied over the good one
    assert k.changed([]) == [] and keepcopy.saved_step(job.path / "kept" / "ckpt.pt") == 10
    # gpujob resume names what the attempt will start from; the restart puts the copy back; a whole file stays
    from remote.core.layout import JobDir
    from remote.jobs.resume import resume_point

    (job.path / "kept" / ".gpujob-tmp.ckpt.pt").write_bytes(b"PK")  # a copy the supervisor's end cut short
    assert resume_point(JobDir(job.path))["resume_from"].startswith("ckpt.pt (its last complete version, step 10, kept")
    assert keepcopy.restore(job.path, ckpt) == [("ckpt.pt", 10)]
    assert keepcopy.saved_step(ckpt / "ckpt.pt") == 10 and keepcopy.restore(job.path, ckpt) == []
    assert sorted(os.listdir(ckpt)) == ["checkpoint_10.pt", "ckpt.pt"]
    assert sorted(os.listdir(job.path / "kept")) == [".kept.json", "ckpt.pt"]
    # no room: skipped, said once
    _torch_like(ckpt / "ckpt.pt", 30)
    free = diskbudget.MIN_FREE
    try:
        diskbudget.MIN_FREE = 1 << 62
        k.copy_all(k.changed([]))
        k.copy_all(k.changed([]))
    finally:
        diskbudget.MIN_FREE = free
    assert len(notes) == 1 and "no copy kept of ckpt.pt" in notes[0], notes
    assert keepcopy.saved_step(job.path / "kept" / "ckpt.pt") == 10
