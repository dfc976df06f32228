"""Several gpujob processes at once on the laptop's own files (issue 35): ten submits to a host just
added all succeed and its preflight runs once; twenty `host set` / `host add` / `submit` at once
leave every change in place. Real CLI processes against a real sshd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, Sshd, run_cli

QUICK_PREFLIGHT = {"GPUJOB_PREFLIGHT": "1", "GPUJOB_BENCH_DISK_MIB": "8"}


def cli(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env_extra or {}))
    return subprocess.Popen([sys.executable, "-m", "gpujob.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env=env)


def add_fresh_host(sshd: Sshd, tmp_path: Path, name: str = "hb") -> None:
    from gpujob.config.keys import public_key_line

    sshd.authorize(public_key_line())
    r = run_cli("host", "add", name, "--ssh", sshd.ssh_line(), "--root", str(tmp_path / "remote-root"),
                "--preset", "generic")
    assert r.returncode == 0, r.stderr


def project(tmp_path: Path, i: int) -> Path:
    d = tmp_path / f"p{i}"
    d.mkdir()
    (d / "w.py").write_text(f"print('job {i}')\n")
    (d / "job.yaml").write_text(json.dumps({"name": f"p{i}", "run": f"{sys.executable} w.py"}))
    return d / "job.yaml"


def finish(procs: list[subprocess.Popen], timeout: float = 300) -> list[tuple[int, str, str]]:
    out = []
    for p in procs:
        o, e = p.communicate(timeout=timeout)
        out.append((p.returncode, o, e))
    return out


def test_ten_submits_to_a_host_just_added_all_succeed_and_preflight_once(sshd: Sshd, tmp_path: Path) -> None:
    add_fresh_host(sshd, tmp_path)
    jobs = [project(tmp_path, i) for i in range(10)]
    # no --json: the preflight's note is on stderr
    results = finish([cli("submit", str(j), "--host", "hb", env_extra=QUICK_PREFLIGHT) for j in jobs])
    for i, (rc, out, err) in enumerate(results):
        assert rc == 0 and "Traceback" not in err, f"submit {i}: rc {rc}\n{err}{out}"
    said = [err for _rc, _out, err in results if "preflight of hb" in err]
    assert len(said) == 1, [err for _rc, _out, err in results]
    ids = {e["job_id"] for e in json.loads(run_cli("ls", "--host", "hb", "--all", "--json").stdout)["jobs"]}
    assert len(ids) == 10
    hosts = json.loads(run_cli("host", "ls", "--json").stdout)
    hb = next(h for h in hosts if h["name"] == "hb")
    assert hb["bench"]["disk"]["write_mbs"] > 0  # the one preflight's figures are kept
    # the job index names each job once, each on hb
    index = [json.loads(line) for line in (tmp_path / "state" / "jobs.jsonl").read_text().splitlines()]
    assert sorted(e["job_id"] for e in index) == sorted(ids) and {e["host"] for e in index} == {"hb"}
    # the run ledger (SQLite, ten writers at once) holds each run
    runs = json.loads(run_cli("runs", "--json").stdout)["runs"]
    assert sorted(r["job_id"] for r in runs) == sorted(ids)
    leftovers = [p.name for d in ("config", "state", "cache") for p in (tmp_path / d).rglob("*") if ".tmp" in p.name]
    assert not leftovers, leftovers


def test_twenty_writers_at_once_leave_every_change_in_place(sshd: Sshd, tmp_path: Path) -> None:
    add_fresh_host(sshd, tmp_path)
    sets = [("--price", "1.5", "price_per_hour", 1.5), ("--hf-endpoint", "https://hf.example", "hf_endpoint", "https://hf.example"),
            ("--pip-index-url", "https://pip.example/simple", "pip_index_url", "https://pip.example/simple"),
            ("--private-address", "10.0.0.7", "private_address", "10.0.0.7"),
            ("--tensorboard-port", "6123", "tensorboard_port", 6123), ("--data-disk", "/data", "data_disk", "/data"),
            ("--shutdown-command", "true", "shutdown_command", "true"), ("--network-turbo", "setup", "network_turbo", "setup")]
    procs = [cli("host", "set", "hb", flag, value) for flag, value, _k, _v in sets]
    procs += [cli("host", "add", f"extra{i}", "--ssh", f"ssh -p {2200 + i} root@10.1.0.{i + 1}", "--no-check")
              for i in range(8)]
    # submits to hb: each runs the host's preflight or waits for it, and keeps its figures in the profile
    procs += [cli("submit", str(project(tmp_path, i)), "--host", "hb", "--json", env_extra=QUICK_PREFLIGHT)
              for i in range(4)]
    results = finish(procs)
    for args, (rc, out, err) in zip([p.args for p in procs], results):
        assert rc == 0 and "Traceback" not in err, f"{args[3:]}: rc {rc}\n{err}{out}"
    hosts = {h["name"]: h for h in json.loads(run_cli("host", "ls", "--json").stdout)}
    assert {f"extra{i}" for i in range(8)} <= set(hosts), sorted(hosts)
    for i in range(8):
        assert (hosts[f"extra{i}"]["hostname"], hosts[f"extra{i}"]["port"]) == (f"10.1.0.{i + 1}", 2200 + i)
    hb = hosts["hb"]
    for flag, _value, key, want in sets:
        assert hb.get(key) == want, (flag, hb)
    assert hb["port"] == sshd.port and hb["bench"]["disk"]["write_mbs"] > 0


WRITER = """
import sys
sys.path.insert(0, sys.argv[1])
from remote.core import atomicfile
for k in range(int(sys.argv[4])):
    atomicfile.update_json(sys.argv[2], lambda doc: doc.update({"%s-%d" % (sys.argv[3], k): k}))
    atomicfile.append(sys.argv[2] + ".log", "%s-%d\\n" % (sys.argv[3], k))
"""


def test_twenty_processes_rewriting_one_file_lose_nothing_and_no_reader_sees_a_part(tmp_path: Path) -> None:
    """remote/core/atomicfile.py itself, as the agent uses it (the laptop's files go through it too)."""
    target = tmp_path / "shared.json"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(REPO), str(target), f"w{i}", "15"])
             for i in range(20)]
    seen = 0
    while any(p.poll() is None for p in procs):
        try:
            raw = target.read_bytes()
        except FileNotFoundError:
            continue
        json.loads(raw)  # never empty, never a part
        seen += 1
    assert all(p.wait() == 0 for p in procs)
    doc = json.loads(target.read_text())
    assert doc == {f"w{i}-{k}": k for i in range(20) for k in range(15)}
    lines = (tmp_path / "shared.json.log").read_text().splitlines()
    assert sorted(lines) == sorted(f"w{i}-{k}" for i in range(20) for k in range(15))
    assert seen > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [".shared.json.lock", ".shared.json.log.lock", "shared.json",
                                                          "shared.json.log"]  # no temporary file left
