"""A job that rewrites its own ``data:`` file in place (jobs run as root: write bits stop nothing)
damages no later job (remote/data/blobcheck.py, docs/job-spec.md#where-data-lives): the next job
submitted from the unchanged laptop file reads the bytes sent, whether the writer left the file's
mtime moved or put it back; the writer keeps its own changed copy; gc still frees every blob."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from remote.core.errors import AgentError
from remote.data import blobcheck, datastore
from remote.data.transfer import hash_cache
from remote.stream.hashing import file_hash
from tests.byo_helpers import job_dir, log_text
from tests.conftest import run_cli
from tests.helpers import remote_root, submit, wait_state, write_job

ORIGINAL = "original-bytes-0123456789\n"
DAMAGED = "DAMAGED!-bytes-0123456789\n"  # the same size: only the content (and, if put back, not the mtime) tells

# ``write``: rewrites the data file in place, as a preprocessing script does (``keep-mtime``: and puts
# its mtime back); ``read``: prints what it reads
SCRIPT = """
    import os, sys
    path = os.path.join(os.environ["GPUJOB_DATA_DIR"], "corpus.txt")
    if sys.argv[1] == "read":
        print("read", open(path).read().strip(), flush=True)
    else:
        st = os.stat(path)
        with open(path, "w") as f:
            f.write(sys.argv[2] + "\\n")
        if sys.argv[1] == "keep-mtime":
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        print("wrote", flush=True)
"""


def _project(tmp_path: Path, run: str) -> Path:
    job = write_job(tmp_path, "dmg", SCRIPT, run, env={"OMP_NUM_THREADS": "1"})
    src = tmp_path / "corpus.txt"  # beside the project, not in its code
    src.write_text(ORIGINAL)
    spec = json.loads(job.read_text())
    spec["data"] = [{"src": str(src), "dst": "corpus.txt"}]
    job.write_text(json.dumps(spec))
    return job


def _rerun(job: Path, run: str) -> None:
    spec = json.loads(job.read_text())
    spec["run"] = run
    job.write_text(json.dumps(spec))


def _done(host: str, tmp_path: Path, job_id: str) -> str:
    st = wait_state(host, job_id, ("succeeded", "failed"), 90)
    text = log_text(job_dir(tmp_path, host, job_id))
    assert st["state"] == "succeeded", text
    return text


def _blobs(root: Path) -> list[Path]:
    store = root / "store"
    return sorted(p for p in store.glob("*/*") if not p.name.startswith(".")) if store.is_dir() else []


@pytest.mark.parametrize("how", ["write", "keep-mtime"])
def test_a_job_rewriting_its_data_in_place_damages_no_later_job(any_host: str, tmp_path: Path, how: str) -> None:
    job = _project(tmp_path, f"python main.py {how} {DAMAGED.strip()}")
    first = submit(any_host, job)["job_id"]
    assert "wrote" in _done(any_host, tmp_path, first)
    view1 = job_dir(tmp_path, any_host, first) / "data" / "corpus.txt"
    assert view1.read_text() == DAMAGED  # the writer's own view holds what it wrote

    _rerun(job, "python main.py read")  # the laptop's data file is unchanged
    second = submit(any_host, job)
    assert second["sync"]["files_sent"] >= 1, second["sync"]  # the host's copy was damaged: its bytes travel again
    assert f"read {ORIGINAL.strip()}" in _done(any_host, tmp_path, second["job_id"])
    assert view1.read_text() == DAMAGED  # never deleted or rewritten under the job that changed it

    root = remote_root(tmp_path, any_host)
    want = file_hash(tmp_path / "corpus.txt").hexdigest()
    assert [p.name for p in _blobs(root)] == [want]  # the store holds the sent bytes under their hash, nothing else
    assert _blobs(root)[0].read_text() == ORIGINAL

    third = submit(any_host, job)  # nothing is damaged now: nothing travels, the same bytes are read
    assert third["sync"]["files_sent"] == 0, third["sync"]
    assert f"read {ORIGINAL.strip()}" in _done(any_host, tmp_path, third["job_id"])

    r = run_cli("gc", any_host, "--older-than", "0s", "--json")  # gc still frees every blob
    assert r.returncode == 0, r.stderr
    assert _blobs(root) == []


def _stage(root: Path, text: str) -> Path:
    staged = datastore.staging(root, "p") / "corpus.txt"
    staged.parent.mkdir(parents=True)
    staged.write_text(text)
    return staged


def test_a_staged_file_damaged_between_sync_and_view_makes_no_job(tmp_path: Path) -> None:
    """The sync's manifest rechecks a staged file that is a blob; one damaged after it (the
    staged file is then the only copy, and it is damaged) makes no job: a clear error, and the
    damaged blob leaves the store while the job that holds it keeps it."""
    root = tmp_path / "root"
    _stage(root, ORIGINAL)
    j1, j2 = tmp_path / "j1", tmp_path / "j2"
    datastore.build_view(root, "p", ["corpus.txt"], j1, hash_cache(root))
    view1 = j1 / "data" / "corpus.txt"
    st = os.stat(view1)
    with open(view1, "w") as f:  # root: the missing write bits stop nothing
        f.write(DAMAGED)
    os.utime(view1, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(AgentError) as e:
        datastore.build_view(root, "p", ["corpus.txt"], j2, hash_cache(root))
    assert e.value.code == "data_damaged" and "submit again" in e.value.remedy
    assert _blobs(root) == []
    assert view1.read_text() == DAMAGED


def test_removing_a_job_keeps_its_blobs_prints(tmp_path: Path) -> None:
    """``rm``/``gc`` unlink a job's view, which moves its blobs' ctime: the store follows, so the
    next job's view trusts the blob by one stat instead of hashing it again."""
    root = tmp_path / "root"
    _stage(root, ORIGINAL)
    j1, j2 = tmp_path / "j1", tmp_path / "j2"
    datastore.build_view(root, "p", ["corpus.txt"], j1, hash_cache(root))
    datastore.build_view(root, "p", ["corpus.txt"], j2, hash_cache(root))
    blob = str(_blobs(root)[0])
    with datastore.releasing(root, j1):
        os.unlink(j1 / "data" / "corpus.txt")
    assert blobcheck.prints(root).get(blob, os.stat(blob)) == file_hash(Path(blob)).hexdigest()
    os.unlink(j2 / "data" / "corpus.txt")  # not through the store: the print no longer holds
    assert blobcheck.prints(root).get(blob, os.stat(blob)) is None
