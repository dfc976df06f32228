"""The kept copy of a checkpoint saved in place never takes the room the job's own writes need
(remote/ckpt/diskbudget.py): on a real small loop-mounted ext4, a job that succeeds with
``checkpoint: {backup: false}`` succeeds with the default too, and a kept copy is given up (deleted, said
once) the moment free space falls below the job's next save and the margin."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import run_cli
from tests.helpers import needs, wait_for, wait_state, write_job
from tests.loopfs import allocate, free, loopfs

GB = 1 << 30

# The disk shape, at a small checkpoint's scale: room for ckpt.pt, its next temporary save
# and the 2 GiB the old rule left spare beside a copy, which the job's own data (a preallocated dataset
# cache, as np.memmap makes one) then takes. The save is torch.save over the name; the second by
# temp file + rename. The gate "go" opens once the agent decided about a copy of the first save.
JOB = """
    import io, os, time, torch
    model = torch.nn.Linear(1024, 8192)  # 32 MiB of weights
    path = os.path.join("out", "ckpt.pt")
    os.makedirs("out", exist_ok=True)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "iter_num": 1}, buf)
    size = len(buf.getvalue())
    def free():
        st = os.statvfs(".")
        return st.f_bavail * st.f_frsize
    def take(name, n):
        fd = os.open(name, os.O_CREAT | os.O_WRONLY)
        os.posix_fallocate(fd, 0, n)
        os.close(fd)
    spare = 2 * 2**30 + 8 * 2**20
    take("other.bin", free() - (2 * size + spare))  # the disk: the save, the next one, and the spare
    torch.save({"model": model.state_dict(), "iter_num": 1}, path)
    print("saved 1", flush=True)
    while not os.path.exists("go"):
        time.sleep(0.05)
    take("cache.bin", spare - 4 * 2**20)  # the job's own data: what the old rule left spare
    torch.save({"model": model.state_dict(), "iter_num": 2}, path + ".tmp")
    os.replace(path + ".tmp", path)
    print("saved 2", flush=True)
"""


def run_job(tmp_path: Path, mnt: Path, backup: bool, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("GPUJOB_LOCAL_ROOT", str(mnt / "root"))
    ck: dict = {"dir": "out"} if backup else {"dir": "out", "backup": False}
    job = write_job(tmp_path, f"tight-{int(backup)}", JOB, "python main.py", checkpoint=ck)
    r = run_cli("submit", str(job), "--json")
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    jd = mnt / "root" / "jobs" / job_id
    try:
        log = jd / "output.log"
        wait_for(lambda: log.exists() and "saved 1" in log.read_text(), 120, "the first save")
        if backup:  # the agent's look at the first save: a copy kept, or none for want of room
            wait_for(lambda: (jd / "kept" / ".kept.json").exists() or "no copy kept of ckpt.pt" in log.read_text(),
                     60, lambda: "the keeper's decision: " + log.read_text()[-400:])
        (jd / "code" / "go").write_text("")
        st = wait_state("local", job_id, ("succeeded", "failed"), 120)
    finally:
        run_cli("stop", job_id)
    return dict(st, log=(jd / "output.log").read_text(), jd=jd)


def test_a_job_that_succeeds_without_the_kept_copy_succeeds_with_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    needs("torch")
    for backup in (False, True):  # each on a disk of its own, shaped alike
        with loopfs(tmp_path / f"disk-{backup}", "2600M") as mnt:
            st = run_job(tmp_path, mnt, backup, monkeypatch)
            assert st["state"] == "succeeded", (backup, st["log"][-1500:])
            assert "saved 2" in st["log"] and "No space left" not in st["log"]
    # with the copy: refused for want of room beside the next save, said once; nothing kept
    assert st["log"].count("no copy kept of ckpt.pt") == 1, st["log"]
    assert not (st["jd"] / "kept" / "ckpt.pt").exists()


def test_a_kept_copy_is_given_up_when_free_space_falls_below_the_next_save(tmp_path: Path) -> None:
    """The copy was made with room to spare; the job's own data then takes the disk down below its next
    save and the margin: the copy is deleted at the next look, said once in the log and in status."""
    from remote.ckpt import diskbudget, keepcopy

    with loopfs(tmp_path, "2600M") as mnt:
        job = SimpleNamespace(path=mnt / "job")
        ckpt = job.path / "ckpt"
        ckpt.mkdir(parents=True)
        allocate(ckpt / "ckpt.pt", 16 << 20)  # not a zip: judged whole once it stood still SETTLE s
        os.utime(ckpt / "ckpt.pt", (1e9, 1e9))
        notes: list[str] = []
        said: list[str] = []
        k = keepcopy.Keeper(job, ckpt, None, notes.append, say=said.append)
        sup = SimpleNamespace(job_pids=lambda: [])
        k.tick(sup)
        k.wait()
        assert (job.path / "kept" / "ckpt.pt").stat().st_size == 16 << 20 and not notes
        # the job's data leaves less than its next save (16 MiB) and the margin free
        need = 16 << 20
        allocate(mnt / "data.bin", free(mnt) - diskbudget.margin(os.statvfs(mnt).f_blocks * os.statvfs(mnt).f_frsize)
                 - need // 2)
        k.next_at = 0
        k.tick(sup)
        k.wait()
        assert not (job.path / "kept" / "ckpt.pt").exists() and not (job.path / "kept" / ".kept.json").exists()
        assert len(notes) == 1 and "kept copy given up and deleted" in notes[0] and said == notes, notes
        # the next looks neither copy again (no room beside the next save) nor say it again
        for _ in range(2):
            k.next_at = 0
            k.tick(sup)
            k.wait()
        assert not (job.path / "kept" / "ckpt.pt").exists() and len(notes) == 1, notes
        # a copy under way stops at the next chunk when the budget says the room is the job's; nothing left
        big = mnt / "big.pt"
        allocate(big, keepcopy.CHUNK + (1 << 20))
        asked: list[int] = []
        assert keepcopy.copy_file(big, mnt / "copy.pt", lambda tmp, st: True,
                                  lambda: bool(asked.append(1))) is False
        assert asked == [1] and not (mnt / "copy.pt").exists() and not (mnt / ".gpujob-tmp.copy.pt").exists()
    # status shows what the supervisor recorded (status.json's kept_copy)
    from rich.console import Console

    from gpujob.ui.jobs import job_panel

    con = Console(width=300, record=True)
    con.print(job_panel({"job_id": "j", "host": "local", "state": "running", "kept_copy": said[0]}))
    shown = con.export_text()
    assert any(ln.lstrip().startswith("kept copy") and "given up and deleted" in ln for ln in shown.splitlines()), shown


# the job's autostop watches its disk: it stops below 2.5 GiB free. The disk leaves 16 MiB above that
# after the first save; the kept copy of that save (32 MiB) would take the job under it.
WATCHED = """
    import os, time, torch
    model = torch.nn.Linear(1024, 8192)
    path = os.path.join("out", "ckpt.pt")
    os.makedirs("out", exist_ok=True)
    torch.save({"model": model.state_dict(), "iter_num": 0}, "probe.pt")
    size = os.path.getsize("probe.pt")
    os.unlink("probe.pt")
    st = os.statvfs(".")
    fd = os.open("other.bin", os.O_CREAT | os.O_WRONLY)
    os.posix_fallocate(fd, 0, st.f_bavail * st.f_frsize - (size + 2560 * 2**20 + 16 * 2**20))
    os.close(fd)
    torch.save({"model": model.state_dict(), "iter_num": 1}, path)
    print("saved 1", flush=True)
    while not os.path.exists("go"):
        time.sleep(0.05)
    for i in range(40):  # autostop looks every 0.2 s meanwhile
        print("step", i, flush=True)
        time.sleep(0.1)
    torch.save({"model": model.state_dict(), "iter_num": 2}, path)
    print("saved 2", flush=True)
"""


def test_the_kept_copy_does_not_set_off_autostop_disk_free_below(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    needs("torch")
    with loopfs(tmp_path / "disk", "3000M") as mnt:
        monkeypatch.setenv("GPUJOB_LOCAL_ROOT", str(mnt / "root"))
        job = write_job(tmp_path, "watched", WATCHED, "python main.py", checkpoint={"dir": "out"},
                        autostop={"disk_free_below": "2560MB", "check_every": "0.2s"})
        r = run_cli("submit", str(job), "--json")
        assert r.returncode == 0, r.stderr
        job_id = json.loads(r.stdout)["job_id"]
        jd = mnt / "root" / "jobs" / job_id
        try:
            wait_for(lambda: (jd / "kept" / ".kept.json").exists(), 120,
                     lambda: "the kept copy: " + (jd / "output.log").read_text()[-400:])
            (jd / "code" / "go").write_text("")
            st = wait_state("local", job_id, ("succeeded", "failed", "stopped", "autostopped"), 120)
        finally:
            run_cli("stop", job_id)
        log = (jd / "output.log").read_text()
        assert st["state"] == "succeeded" and "saved 2" in log, (st.get("reason"), log[-1000:])
