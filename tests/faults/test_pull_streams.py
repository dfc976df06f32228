"""A malicious or merely odd instance: crafted pull streams, links into the job, and nine pulls
into one folder at once."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from gpujob.usecases.pull import extract, wire
from tests.conftest import REPO
from tests.helpers import submit, wait_state, write_job


def stream(*entries: list) -> io.BytesIO:
    """One batch of folder and link entries, then the end record."""
    return io.BytesIO(wire.MAGIC + wire.frame(b"B", list(entries)) + wire.frame(b"E", {}))


def outside(dest: Path) -> list[str]:
    """Links under ``dest`` that resolve outside it."""
    root = os.path.realpath(dest)
    return [str(p) for p in dest.rglob("*") if p.is_symlink()
            and not (os.path.realpath(p) + "/").startswith(root + "/")]


def test_a_chain_of_links_cannot_lead_out(tmp_path: Path) -> None:
    dest = tmp_path / "a" / "b" / "c" / "dest"
    deep = "/".join(f"d{i}" for i in range(1, 13))
    dirs = [["d", "/".join(deep.split("/")[:i]), 0o755] for i in range(1, 13)]
    evil = stream(*dirs, ["l", f"{deep}/up", "../../.."], ["l", "z", f"{deep}/up/" + "../" * 13 + "etc"],
                  ["f", "ok.txt", 0o644, 0, 2, wire.small_hash(b"ok")])
    data = evil.getvalue()
    evil = io.BytesIO(data[: -len(wire.frame(b"E", {}))] + b"ok" + wire.frame(b"E", {}))
    res = extract(evil, dest)
    assert not os.path.lexists(dest / "z") and outside(dest) == []
    assert any(s.startswith("z -> ") for s in res["skipped"])
    assert (dest / "ok.txt").read_text() == "ok"  # not fatal: the rest arrived
    assert os.readlink(dest / deep / "up") == "../../.."  # inside: kept


def test_a_later_link_cannot_redirect_an_earlier_one_out(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    res = extract(stream(["d", "d1", 0o755], ["d", "d1/d2", 0o755], ["d", "d1/d2/d3", 0o755],
                         ["l", "d1/d2/d3/b", "x/../.."], ["l", "d1/d2/d3/x", "../../.."]), dest)
    assert outside(dest) == [] and not os.path.lexists(dest / "d1/d2/d3/b")
    assert os.readlink(dest / "d1/d2/d3/x") == "../../.." and res["skipped"]


LINKS_JOB = """
import os
from pathlib import Path
ck = Path(os.environ["GPUJOB_CKPT_DIR"])
(ck / "step-1").mkdir()
(ck / "step-1" / "w.bin").write_bytes(b"w" * 1000)
(ck / "step-1" / ".gpujob-complete").write_text("")
os.symlink(str((ck / "step-1").resolve()), ck / "latest")
os.symlink(".", ck / "x")
os.symlink("/etc", ck / "escape")
print("done")
"""


def pull_cli(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "gpujob.cli", "pull", *args, "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)


def test_links_inside_the_job_arrive_relative_and_one_out_is_skipped(tmp_path: Path) -> None:
    job_id = submit("local", write_job(tmp_path, "links", LINKS_JOB, "python main.py"))["job_id"]
    assert wait_state("local", job_id, ("succeeded", "failed"))["state"] == "succeeded"
    p = pull_cli(job_id, str(tmp_path / "p"))
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    got = Path(json.loads(out)["dest"]) / "ckpt"
    assert os.readlink(got / "latest") == "step-1" and (got / "latest" / "w.bin").read_bytes() == b"w" * 1000
    assert os.readlink(got / "x") == "."
    assert not os.path.lexists(got / "escape")
    assert "escape -> /etc" in err and "not kept" in err and "Traceback" not in err


BIG_JOB = """
import os
from pathlib import Path
ck = Path(os.environ["GPUJOB_CKPT_DIR"]) / "step-1"
ck.mkdir()
(ck / "model.bin").write_bytes(os.urandom(3 * 4 * 1024 * 1024 + 123))
(ck / ".gpujob-complete").write_text("")
"""


def test_nine_concurrent_pulls_into_one_folder(tmp_path: Path) -> None:
    job_id = submit("local", write_job(tmp_path, "big", BIG_JOB, "python main.py"))["job_id"]
    assert wait_state("local", job_id, ("succeeded", "failed"))["state"] == "succeeded"
    dest = tmp_path / "shared"
    procs = [pull_cli(job_id, str(dest)) for _ in range(9)]
    results = [(p.wait(240), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    assert all(rc == 0 for rc, _, _ in results), [r for r in results if r[0]]
    src = tmp_path / "local-root" / "jobs" / job_id / "ckpt" / "step-1" / "model.bin"
    assert (dest / job_id / "ckpt" / "step-1" / "model.bin").read_bytes() == src.read_bytes()
    assert not list(dest.rglob("*.gpujob-part*"))
    assert any("another pull into" in err for _, _, err in results)
