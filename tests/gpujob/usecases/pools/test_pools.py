"""Pools: instances made and released on demand through the provider's commands (docs/pools.md).

The provider (provider.py beside this file) really makes instances: each ``create`` starts a new
OpenSSH sshd with its own port, host key and authorized key, and ``release`` ends it, at the
boundary a real provider's command line has. Jobs are one-liners: the instance's life is the test.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, SSHD, run_cli
from tests.helpers import wait_for, write_job

PROVIDER = Path(__file__).with_name("provider.py")


@pytest.fixture
def prov(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The provider's folder; every sshd it started is gone after the test, whatever its outcome."""
    if SSHD is None:
        pytest.skip("sshd not installed (apt-get install openssh-server)")
    monkeypatch.setenv("GPUJOB_POOL_WATCH_INTERVAL", "0.3")
    monkeypatch.setenv("GPUJOB_POOL_POLL", "0.3")
    d = tmp_path / "prov"
    d.mkdir()
    yield d
    for pid in [*sshd_pids(d).values(), *watchers(tmp_path)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def watchers(tmp_path: Path) -> list[int]:
    """The test's laptop watchers still running (each leaves once its instance is released)."""
    from remote.core.procs import _cmdline, _environ, _parents

    mine = f"GPUJOB_STATE_DIR={tmp_path / 'state'}".encode()
    return [pid for pid in _parents() if b"gpujob.usecases.pools.watch" in _cmdline(pid) and mine in _environ(pid)]


def sshd_pids(d: Path) -> dict[str, int]:
    """The instances' sshd processes still there (a zombie is gone), by instance id."""
    out = {}
    for f in d.glob("sshd-*/pid"):
        pid = int(f.read_text())
        try:
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != b"Z":
            out[f.parent.name] = pid
    return out


def add_pool(tmp_path: Path, prov: Path, *extra: str) -> None:
    p = f"{sys.executable} {PROVIDER} {prov}"
    r = run_cli("pool", "add", "p", "--create", f"{p} create", "--release", f"{p} release", "--list", f"{p} list",
                "--root", str(tmp_path / "pool-root"), *extra)
    assert r.returncode == 0, r.stderr


def rows() -> list[dict]:
    from gpujob.config.pools import instances

    return [dict(r) for r in instances()]


def start_submit(job: Path, out: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "gpujob.cli", "submit", str(job), "--pool", "p", "--json", *extra],
                            stdout=open(out, "w"), stderr=open(out.with_suffix(".err"), "w"), env=env,
                            stdin=subprocess.DEVNULL)


def test_submit_makes_instances_up_to_max_a_third_waits_and_each_is_released_after(tmp_path: Path, prov: Path) -> None:
    add_pool(tmp_path, prov, "--max", "2", "--keep-warm", "2s", "--price-per-hour", "36")
    go = tmp_path / "GO"
    job = write_job(tmp_path, "hold", f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.1)\n",
                    "python main.py")
    a, b = (json.loads(run_cli("submit", str(job), "--pool", "p", "--json").stdout)["job_id"] for _ in range(2))
    assert {r["name"]: r["job_id"] for r in rows()} == {"p-1": a, "p-2": b}
    assert len(sshd_pids(prov)) == 2  # two instances really made
    ls = json.loads(run_cli("pool", "ls", "--json").stdout)
    assert [(i["name"], i["state"], i["job_id"]) for i in ls["instances"]] == [("p-1", "busy", a), ("p-2", "busy", b)]
    assert all(i["cost"] is not None and i["currency"] == "CNY" for i in ls["instances"])

    third = start_submit(job, tmp_path / "c.json")  # the pool is full: it waits, and says so
    wait_for(lambda: "waiting for one to free" in (tmp_path / "c.err").read_text(), 30, "the third submit's wait")
    go.touch()  # both jobs end; the first instance freed takes the third job (kept warm 2 s)
    assert third.wait(60) == 0, (tmp_path / "c.err").read_text()
    c = json.loads((tmp_path / "c.json").read_text())["job_id"]
    assert "is free: the job goes there" in (tmp_path / "c.err").read_text()
    wait_for(lambda: all(r["state"] == "released" for r in rows()), 60, lambda: f"every instance released: {rows()}")
    assert len(rows()) == 2 and not sshd_pids(prov)  # no third instance was made; both sshd are gone
    wait_for(lambda: not watchers(tmp_path), 10, "the watchers gone with their instances")
    assert sorted((prov / "released").read_text().split()) == sorted(r["id"] for r in rows())

    from gpujob.config.ledger import open_ledger
    from gpujob.config.pools import instance_intervals, interval_cost

    with open_ledger() as lg:  # the watcher's last look: the ledger has each job's end
        assert [(lg.get(j) or {}).get("state") for j in (a, b, c)] == ["succeeded"] * 3
    spans = instance_intervals()
    assert all(iv["released_at"] and iv["released_at"] > iv["made_at"] for iv in spans)
    cost = json.loads(run_cli("cost", "--json").stdout)
    assert {h: cost["hosts"][h]["cost"] for h in ("p-1", "p-2")} == {iv["host"]: interval_cost(iv) for iv in spans}
    assert cost["total"]["CNY"] == pytest.approx(sum(interval_cost(iv) or 0 for iv in spans))
    assert not cost["errors"]  # released instances are not asked (their jobs come from the ledger)
    # the account's spend (gpujob budget) bills the same lives, each once: not their jobs again
    month = {r["period"]: r for r in json.loads(run_cli("budget", "--json").stdout)["currencies"]["CNY"]}["month"]
    assert month["spent"] == pytest.approx(sum(interval_cost(iv) or 0 for iv in spans), abs=0.01 * len(spans))
    # a job the month's limit refuses is refused before an instance is made for it (at the pool's price)
    assert run_cli("budget", "set", "--month", "5").returncode == 0
    long = write_job(tmp_path, "long", "print(1)\n", "python main.py", autostop={"max_runtime": "1h"})
    r = run_cli("submit", str(long), "--pool", "p")
    assert r.returncode == 2 and "would pass the month limit" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(rows()) == 2 and not sshd_pids(prov)
    assert run_cli("pool", "rm", "p").returncode == 0


def test_stock_wait_then_a_half_made_instance_is_released_and_a_hung_release_is_bounded(
        tmp_path: Path, prov: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUJOB_POOL_RELEASE_TIMEOUT", "1")
    p = f"{sys.executable} {PROVIDER} {prov}"
    add_pool(tmp_path, prov, "--stock", f"{p} stock", "--gpu", "A100", "--region", "r2", "--region", "r1")
    job = write_job(tmp_path, "one", "print('hello from the pool')\n", "python main.py")

    (prov / "stock").write_text("r1 A100 0\nr2 4090 3\n")  # none of what the pool allows
    sub = start_submit(job, tmp_path / "s.json", "--wait-gpus", "60s")
    wait_for(lambda: "no A100 in stock in r2/r1; trying again in" in (tmp_path / "s.err").read_text(), 30,
             lambda: (tmp_path / "s.err").read_text())
    (prov / "stock").write_text("r1 A100 2\n")  # stock comes back
    assert sub.wait(60) == 0, (tmp_path / "s.err").read_text()
    made = rows()[0]
    assert (prov / made["id"] / "env").read_text().split() == ["r1", "A100"]  # the choice went to create
    wait_for(lambda: rows()[0]["state"] == "released", 60, lambda: f"released after its job: {rows()}")
    assert not sshd_pids(prov)

    (prov / "fail-after-id").touch()  # create prints the id, then fails: what it made is released
    token = "tok-" + os.urandom(8).hex()  # the provider's token: in its environment, never shown nor written
    (tmp_path / "config" / "secrets.env").write_text(f"PROVIDER_TOKEN={token}\n")
    (tmp_path / "config" / "secrets.env").chmod(0o600)
    r = run_cli("submit", str(job), "--pool", "p")
    assert r.returncode != 0 and "create of pool p failed (exit 1): quota exceeded" in r.stderr, r.stderr
    assert "(token ***)" in r.stderr and token not in r.stderr and "Traceback" not in r.stderr
    assert not any(token in f.read_text(errors="replace") for f in (tmp_path / "config").rglob("*.json"))
    half = rows()[-1]
    assert half["state"] == "released" and half["id"] in (prov / "released").read_text() and not sshd_pids(prov)

    (prov / "fail-after-id").rename(prov / "hang-after-id")  # it prints the id, then hangs: ended, released
    r = run_cli("submit", str(job), "--pool", "p", env_extra={"GPUJOB_POOL_COMMAND_TIMEOUT": "2"})
    assert r.returncode != 0 and "create of pool p gave no answer in 2 s" in r.stderr, r.stderr
    assert rows()[-1]["state"] == "released" and not sshd_pids(prov)

    # Ctrl-C while create hangs after its id: the id is recorded, and the next pool ls releases the instance
    ids_out = len(list(prov.glob("*/said-id")))
    sub = start_submit(job, tmp_path / "i.json")
    wait_for(lambda: len(list(prov.glob("*/said-id"))) > ids_out, 30, lambda: (tmp_path / "i.err").read_text())
    sub.send_signal(signal.SIGINT)
    assert sub.wait(30) != 0
    said = (tmp_path / "i.err").read_text()
    cut = rows()[-1]
    assert cut["id"] and f"interrupted after create made instance {cut['id']}" in said and "Traceback" not in said, said
    assert run_cli("pool", "ls").returncode == 0
    assert rows()[-1]["state"] == "released" and not sshd_pids(prov)

    (prov / "hang-after-id").rename(prov / "fail-after-id")
    (prov / "release-hangs").touch()  # it fails after the id, and its release never answers: bounded, said, recorded
    r = run_cli("submit", str(job), "--pool", "p")
    assert r.returncode != 0 and "release of pool p gave no answer in 1 s" in r.stderr, r.stderr
    assert "may still run and be billed" in r.stderr and "gpujob pool release p-" in r.stderr
    stuck = rows()[-1]
    assert stuck["state"] == "release-failed" and stuck["released_at"] is None and len(sshd_pids(prov)) == 1
    ls = run_cli("pool", "ls")
    assert "release-failed" in ls.stdout and f"gpujob pool release {stuck['name']}" in ls.stdout
    r = run_cli("pool", "rm", "p")
    assert r.returncode == 2 and "has 1 instance(s)" in r.stderr and "--release" in r.stderr
    (prov / "release-hangs").unlink()
    r = run_cli("pool", "release", stuck["name"])
    assert r.returncode == 0, r.stderr
    assert rows()[-1]["state"] == "released" and not sshd_pids(prov)


LOSES = """
import os, pathlib, time
if os.environ.get("GPUJOB_RESUME"):
    print("resumed from", pathlib.Path(os.environ["GPUJOB_RESUME"]).name, flush=True)
    raise SystemExit(0)
done = pathlib.Path(os.environ["GPUJOB_CKPT_DIR"]) / "step-1"
done.mkdir(parents=True, exist_ok=True)
(done / ".gpujob-complete").write_text("ok")
while True:
    time.sleep(0.1)  # until its instance goes away
"""


def test_a_job_whose_instance_is_lost_goes_on_on_a_new_instance_of_the_pool(tmp_path: Path, prov: Path) -> None:
    from tests.conftest import _descendants, job_processes_under

    add_pool(tmp_path, prov, "--price-per-hour", "36")
    (prov / "json").touch()  # create answers in JSON; each instance has a disk (root) of its own
    shared = tmp_path / "shared-fs"
    job = write_job(tmp_path, "loses", LOSES, "python main.py", checkpoint={"dir": str(shared)},
                    retry={"move_after": "1s"})
    job_id = json.loads(run_cli("submit", str(job), "--pool", "p", "--json").stdout)["job_id"]
    first = rows()[0]
    wait_for(lambda: (shared / job_id / "step-1" / ".gpujob-complete").exists(), 60, "the job's checkpoint")

    # the provider lost the instance: its sshd, sessions and job end at one instant. Frozen first, so
    # that no session forked meanwhile reads (or the supervisor writes) a record the lost box never had
    frozen: set[int] = set()
    todo = [sshd_pids(prov)[first["id"]]]
    while todo:
        for pid in todo:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        frozen.update(todo)
        below = {c for p in frozen for c in _descendants(p)} | set(job_processes_under(prov / first["id"] / "root"))
        todo = sorted(below - frozen)
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    outcomes: list[dict] = []

    def moved() -> bool:  # a first look sees it silent, one a second later moves the job
        r = run_cli("guard", job_id, "--once", "--json", timeout=120)
        assert r.returncode == 0, r.stderr
        outcomes[:] = json.loads(r.stdout)["outcomes"]
        return bool(outcomes)

    wait_for(moved, 60, "guard's move")
    assert "move" in outcomes[0], outcomes
    res = outcomes[0]["move"]
    assert outcomes[0]["action"] == "moved" and res["to"] == "p-2" and res["source"] == "shared", outcomes
    assert first["id"] in (prov / "released").read_text()  # the lost one released (its meter stops)
    wait_for(lambda: all(r["state"] == "released" for r in rows()), 60, lambda: f"both released: {rows()}")
    log = prov / rows()[1]["id"] / "root" / "jobs" / job_id / "output.log"
    assert "resumed from step-1" in log.read_text()
    assert not sshd_pids(prov) and [r["name"] for r in rows()] == ["p-1", "p-2"]
