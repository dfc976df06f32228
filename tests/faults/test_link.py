"""Cut and frozen links (a link proxy between the laptop and the test sshd) during sync, tail
and pull, and a dead link (a namespace's link taken down) under the kept connection.

``status -w`` when the link dies: it ends with the link's error (exit 3, no traceback) when
the link stays cut or frozen; it never waits forever. (``tail -f`` reconnects instead, for up
to 30 tries with a growing pause: tests/faults/test_link.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, Sshd, run_cli, stop_sshd
from tests.faults.linkproxy import LinkProxy
from tests.helpers import submit, wait_for, wait_state, write_job


@pytest.fixture
def via(ssh_host: str, sshd: Sshd) -> Iterator[tuple[str, LinkProxy]]:
    """Host ``via``: the test sshd through a link proxy (connect timeout 5 s)."""
    from gpujob.config.hosts import HostStore

    proxy = LinkProxy(sshd.port, rate=40e6)  # 40 MB/s: a cut after N bytes lands near N on a loaded machine too
    store = HostStore()
    h = store.get(ssh_host)
    h.name, h.port = "via", proxy.port
    store.save(h)
    yield "via", proxy
    proxy.close()


def cli(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "gpujob.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)


def cut_after(proxy: LinkProxy, nbytes: int, p: subprocess.Popen) -> None:
    """Cut the link once ``nbytes`` more have crossed it (while ``p`` runs)."""
    start, deadline = proxy.bytes, time.time() + 60
    while proxy.bytes - start <= nbytes and p.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proxy.cut()


def test_a_cut_upload_resumes_on_the_next_submit(via: tuple[str, LinkProxy], tmp_path: Path) -> None:
    host, proxy = via
    job = write_job(tmp_path, "bigsync", "print(len(open('blob.bin','rb').read()))", "python main.py")
    blob = os.urandom(40 << 20)
    (job.parent / "blob.bin").write_bytes(blob)
    assert run_cli("ls", "--host", host).returncode == 0
    p = cli("submit", str(job), "--host", host, "--json")
    cut_after(proxy, 24 << 20, p)  # past the first 16 MiB the receiver lists as verified
    out, err = p.communicate(timeout=120)
    assert p.returncode != 0 and b"Traceback" not in err and b"submit again" in out + err, out + err
    proxy.resume()
    res = submit(host, job)
    assert res["sync"]["resumed_bytes"] > 0
    assert wait_state(host, res["job_id"], ("succeeded", "failed"))["state"] == "succeeded"
    jd = tmp_path / "remote-root" / "jobs" / res["job_id"]
    assert (jd / "code" / "blob.bin").read_bytes() == blob
    assert str(len(blob)) in (jd / "output.log").read_text()


COUNTER = """
import time
for i in range(60):
    print(f"line {i:03d}", flush=True)
    time.sleep(0.1)
"""


def test_tail_follows_through_a_freeze_and_a_cut(via: tuple[str, LinkProxy], tmp_path: Path) -> None:
    host, proxy = via
    job_id = submit(host, write_job(tmp_path, "count", COUNTER, "python main.py"))["job_id"]
    t = cli("tail", job_id, "--host", host, "-f", "-n", "100000")
    log = tmp_path / "remote-root" / "jobs" / job_id / "output.log"
    wait_for(lambda: log.exists() and "line 010" in log.read_text(), 60, "line 10")
    proxy.freeze()
    wait_for(lambda: "line 025" in log.read_text(), 60, "line 25")
    proxy.resume()
    wait_for(lambda: "line 035" in log.read_text(), 60, "line 35")
    proxy.cut()
    time.sleep(0.5)  # the link stays down a moment (cut() refuses new connections meanwhile)
    proxy.resume()
    out, err = t.communicate(timeout=120)
    assert t.returncode == 0, err
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("line ")]
    assert lines == [f"line {i:03d}" for i in range(60)], err
    said = err.decode()  # each outage said once on stderr (the cut for sure; the freeze once probed dead), and its end
    lost, back = said.count("gpujob: lost the link to via"), said.count("gpujob: reconnected to via after")
    assert 1 <= lost <= 2 and lost == back and "reconnecting" in said and "lost the link" not in out.decode(), said


STUBBORN = """
import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # the stop takes its whole grace: the stop call waits on the host
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("up", flush=True)
time.sleep(600)
"""


@pytest.mark.slow  # ~30 s: a stop's grace and two probes of a frozen link
def test_a_link_frozen_under_a_direct_connection_fails_in_seconds_saying_what_to_check(via: tuple[str, LinkProxy],
                                                                                      tmp_path: Path) -> None:
    """A link that freezes under a direct connection (the first command to a host has one) is
    probed after a quiet spell and closed: exit 3 naming the cut and where to look, not a hang for
    the verb's 660 s timeout (stop) or for ever (a pull's or an upload's stream)."""
    host, proxy = via
    job_id = submit(host, write_job(tmp_path, "stub", STUBBORN, "python main.py", stop={"grace": "6s"}))["job_id"]
    jd = tmp_path / "remote-root" / "jobs" / job_id
    wait_for(lambda: (jd / "output.log").exists() and "up" in (jd / "output.log").read_text(), 60, "the job's start")
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUJOB_MUX="0", GPUJOB_LINK_QUIET="2")

    def direct(*args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "gpujob.cli", *args, "--host", host], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, text=True)

    p = direct("stop", job_id)
    wait_for(lambda: (jd / "STOP").exists(), 60, "the stop request on the host")
    proxy.freeze()
    out, err = p.communicate(timeout=120)
    assert p.returncode == 3 and "Traceback" not in err, out + err
    assert "was cut during the 'stop' call" in err and "may have been done on the host" in err, err
    assert f"gpujob status {job_id} shows where things stand" in err, err
    proxy.resume()
    assert wait_state(host, job_id, ("stopped",), 60)["state"] == "stopped"  # what status now says is true

    blob = os.urandom(32 << 20)
    (jd / "ckpt" / "step-1").mkdir(parents=True)
    (jd / "ckpt" / "step-1" / "model.bin").write_bytes(blob)
    (jd / "ckpt" / "step-1" / ".gpujob-complete").write_text("")
    p = direct("pull", job_id, str(tmp_path / "out"))
    start, deadline = proxy.bytes, time.time() + 60
    while proxy.bytes - start < (8 << 20) and p.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proxy.freeze()
    out, err = p.communicate(timeout=120)
    assert p.returncode == 3 and "Traceback" not in err and "cut during the pull" in err, out + err
    proxy.resume()
    r = run_cli("pull", job_id, "--host", host, str(tmp_path / "out"), timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / job_id / "ckpt" / "step-1" / "model.bin").read_bytes() == blob


BIG_CKPT = """
import os
from pathlib import Path
d = Path(os.environ["GPUJOB_CKPT_DIR"]) / "step-1"
d.mkdir()
(d / "model.bin").write_bytes(os.urandom(40 << 20))
(d / ".gpujob-complete").write_text("")
"""


def test_a_cut_pull_resumes(via: tuple[str, LinkProxy], tmp_path: Path) -> None:
    host, proxy = via
    job_id = submit(host, write_job(tmp_path, "bigpull", BIG_CKPT, "python main.py"))["job_id"]
    assert wait_state(host, job_id, ("succeeded", "failed"))["state"] == "succeeded"
    dest = tmp_path / "pulled"
    p = cli("pull", job_id, str(dest), "--host", host, "--latest", "--json")
    cut_after(proxy, 24 << 20, p)
    out, err = p.communicate(timeout=120)
    assert p.returncode != 0 and b"Traceback" not in err and b"pull again" in out + err, out + err
    proxy.resume()
    r = run_cli("pull", job_id, str(dest), "--host", host, "--latest", "--json")
    assert r.returncode == 0, r.stderr
    src = tmp_path / "remote-root" / "jobs" / job_id / "ckpt" / "step-1" / "model.bin"
    got = dest / job_id / "ckpt" / "step-1" / "model.bin"
    assert got.read_bytes() == src.read_bytes()
    assert json.loads(r.stdout)["bytes"] < src.stat().st_size  # resumed, not fetched again


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[tuple[str, object]]:
    """Host ``inst``: an sshd in a network namespace whose link the test can take down."""
    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.keys import public_key_line
    from tests.netlab import make_lab
    from tests.remote.run.test_launcher import _sshd_in

    lab = make_lab(1)
    s = None
    try:
        s = _sshd_in(lab.namespaces[0], lab.addr(0), tmp_path / "inst")
        s.authorize(public_key_line())
        HostStore().save(Host(name="inst", hostname=lab.addr(0), port=22, user="root", root=str(tmp_path / "inst-root"),
                              connect_timeout=5))
        yield "inst", lab
    finally:
        if s is not None:
            stop_sshd(s)
        lab.close()


def test_a_link_taken_down_fails_a_kept_connection_command_like_a_direct_one(instance: tuple[str, object]) -> None:
    host, lab = instance
    assert run_cli("ls", "--host", host).returncode == 0
    assert run_cli("ls", "--host", host).returncode == 0  # over the kept connection
    lab.link(0, False)  # type: ignore[attr-defined]
    direct = run_cli("ls", "--host", host, env_extra={"GPUJOB_MUX": "0"}, timeout=120)
    kept = run_cli("ls", "--host", host, timeout=120)  # it used to hang for 10 minutes
    assert direct.returncode != 0 and "Traceback" not in direct.stderr
    assert (kept.returncode, kept.stderr) == (direct.returncode, direct.stderr)
    lab.link(0, True)  # type: ignore[attr-defined]
    assert run_cli("ls", "--host", host, timeout=120).returncode == 0


def test_a_frozen_link_fails_a_kept_connection_command_like_a_direct_one(via: tuple[str, LinkProxy]) -> None:
    host, proxy = via
    assert run_cli("ls", "--host", host).returncode == 0  # the kept connection is up, and was just used
    proxy.freeze()
    direct = run_cli("ls", "--host", host, env_extra={"GPUJOB_MUX": "0"}, timeout=120)
    assert direct.returncode != 0 and "Traceback" not in direct.stderr and "did not answer" in direct.stderr
    kept = run_cli("ls", "--host", host, timeout=120)  # it used to hang for the 600 s of its timeout
    assert (kept.returncode, kept.stderr) == (direct.returncode, direct.stderr)
    proxy.resume()
    assert run_cli("ls", "--host", host).returncode == 0  # and it comes back by itself


FOREVER = """
import time
print("up", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("fault", ["cut", "freeze"])
def test_status_watch_ends_when_the_link_stays_dead(via: tuple[str, LinkProxy], tmp_path: Path,  # noqa: F811
                                                    fault: str) -> None:
    host, proxy = via
    job_id = submit(host, write_job(tmp_path, "live", FOREVER, "python main.py"))["job_id"]
    log = tmp_path / "remote-root" / "jobs" / job_id / "output.log"
    wait_for(lambda: log.exists() and "up" in log.read_text(), 60, "the job to start")
    p = cli("status", job_id, "--host", host, "-w")
    wait_for(lambda: proxy.bytes > 0 and p.poll() is None, 30, "the view to start")
    getattr(proxy, fault)()
    try:
        out, err = p.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError(f"status -w still running 180 s after the link was {fault}") from None
    text = err.decode()
    assert p.returncode == 3, (p.returncode, text)
    assert "Traceback" not in text
