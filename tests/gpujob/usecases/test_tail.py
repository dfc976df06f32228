"""``gpujob tail``: byte-exact across a link that drops or freezes; --since, --grep, --json."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from tests.conftest import REPO, free_port, run_cli
from tests.helpers import submit, wait_for, wait_state, write_job


class TcpProxy:
    """A TCP relay on 127.0.0.1 between the client and sshd, which a test can break.

    ``kill()`` closes the listener and every connection (a dropped link: both ends see
    it); ``freeze()`` stops relaying but keeps the sockets open (a laptop that slept: the
    client hears nothing, ever); ``start()`` listens again on the same port.
    """

    def __init__(self, target_port: int, port: int | None = None) -> None:
        self.target = target_port
        self.port = port or free_port()
        self.conns: list[socket.socket] = []
        self.frozen: set[int] = set()
        self.lock = threading.Lock()
        self.listener: socket.socket | None = None
        self.acceptor: threading.Thread | None = None
        self.generation = 0
        self.start()

    def start(self) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(16)
        s.settimeout(0.1)  # a close must not wait behind a blocked accept()
        self.listener = s
        self.generation += 1
        self.acceptor = threading.Thread(target=self._accept, args=(s, self.generation), daemon=True)
        self.acceptor.start()

    def _accept(self, listener: socket.socket, gen: int) -> None:
        while self.listener is listener:
            try:
                c, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.settimeout(None)
            try:
                u = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b, gen), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket, gen: int) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                while gen in self.frozen:  # swallow nothing, deliver nothing
                    time.sleep(0.05)
                    if a.fileno() < 0:
                        return
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def freeze(self) -> None:
        """Existing connections go silent; new ones (after ``start``) work."""
        self.frozen.add(self.generation)
        self._close_listener()

    def _close_listener(self) -> None:
        listener, self.listener = self.listener, None
        if listener:
            if self.acceptor is not None:  # the accept loop notices (within its 0.1 s timeout) and leaves
                self.acceptor.join(10)
            listener.close()

    def kill(self) -> None:
        self._close_listener()
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def _proxied_host(sshd_port: int, tmp_path: Path) -> TcpProxy:
    """Point the profile ``box`` at a proxy in front of sshd."""
    from gpujob.config.hosts import HostStore

    proxy = TcpProxy(sshd_port)
    store = HostStore()
    host = store.get("box")
    host.port = proxy.port
    store.save(host)
    return proxy


GATED = """
import os, time
gate = os.path.join(os.environ["GPUJOB_JOB_DIR"], "go")
for phase in range(4):
    while phase and not os.path.exists(gate + str(phase)):  # the test opens each phase
        time.sleep(0.02)
    for i in range(phase * 100, phase * 100 + 100):
        print("line %05d " % i + "x" * (i % 37), flush=True)
        time.sleep(0.005)
print("end", flush=True)
"""


def _tail_proc(job_id: str, host: str, out: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUJOB_LINK_PROBE="2", PYTHONFAULTHANDLER="1")
    return subprocess.Popen([sys.executable, "-m", "gpujob.cli", "tail", job_id, "--host", host, "-f", "-n", "100000000"],
                            stdout=open(out, "wb"), stderr=subprocess.PIPE, env=env)


def test_tail_follow_survives_dropped_and_frozen_links(ssh_host: str, sshd, tmp_path: Path) -> None:
    """Through a proxy that is killed, restarted and frozen, tail -f copies output.log byte for byte."""
    job = write_job(tmp_path, "counter", GATED, "python main.py")
    job_id = submit(ssh_host, job)["job_id"]
    jd = tmp_path / "remote-root" / "jobs" / job_id
    proxy = _proxied_host(sshd.port, tmp_path)
    out = tmp_path / "tail.out"
    p = _tail_proc(job_id, ssh_host, out)

    def followed(n: int) -> bool:
        return b"line %05d" % n in out.read_bytes() or p.poll() is not None

    def written(n: int) -> bool:
        return (jd / "output.log").exists() and b"line %05d" % n in (jd / "output.log").read_bytes()

    try:
        # each fault comes once the follower has shown what was written before it; the job writes
        # the next 100 lines while the link is down or frozen (the follower has to catch up)
        wait_for(lambda: followed(99), 60, "the follower printing line 99")
        proxy.kill()  # the link drops: both ends see it
        (jd / "go1").touch()
        wait_for(lambda: written(199), 30, "lines 100-199 written while the link is down")
        proxy.start()
        wait_for(lambda: followed(199), 60, "the follower catching up after the drop")
        proxy.freeze()  # the laptop sleeps: the old connection never speaks again
        (jd / "go2").touch()
        wait_for(lambda: written(299), 30, "lines 200-299 written while the link is frozen")
        proxy.start()
        wait_for(lambda: followed(299), 60, "the follower catching up after the freeze")
        (jd / "go3").touch()
        try:
            rc = p.wait(60)
        except subprocess.TimeoutExpired:
            import signal
            p.send_signal(signal.SIGABRT)
            p.wait(10)
            rc = -1
        err = p.stderr.read().decode()[-6000:] if p.stderr else ""
        print(err)
        assert rc == 0, err
    finally:
        if p.poll() is None:
            p.kill()
        proxy.kill()
    log = (tmp_path / "remote-root" / "jobs" / job_id / "output.log").read_bytes()
    got = out.read_bytes()
    assert log.count(b"\nline ") + log.startswith(b"line ") >= 400 or b"line 00399" in log
    assert got == log, f"tail copied {len(got)} bytes, the log has {len(log)}"


def test_tail_since_grep_json(tmp_path: Path) -> None:
    """--since starts at the first line written at or after the time; --grep and --json filter and frame."""
    script = """
import time, pathlib
for i in range(5):
    print("early", i, flush=True)
time.sleep(2.5)
pathlib.Path("../mid").write_text(repr(time.time()))
for i in range(12):
    print("late", i, flush=True)
"""
    job = write_job(tmp_path, "since", script, "python main.py")
    job_id = submit("local", job)["job_id"]
    assert wait_state("local", job_id, ("succeeded", "failed"))["state"] == "succeeded"
    jdir = tmp_path / "local-root" / "jobs" / job_id
    mid = float((jdir / "mid").read_text())
    r = run_cli("tail", job_id, "--host", "local", "--since", datetime.fromtimestamp(mid).isoformat())
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "early 4" not in r.stdout and lines[0] == "late 0", lines[:3]
    assert [ln for ln in lines if ln.startswith("late")] == [f"late {i}" for i in range(12)]

    r = run_cli("tail", job_id, "--host", "local", "-n", "1000", "--grep", r"^late 1\d?$")
    assert r.stdout.splitlines() == ["late 1", "late 10", "late 11"]

    r = run_cli("tail", job_id, "--host", "local", "-n", "3", "--json")
    docs = [json.loads(x) for x in r.stdout.splitlines()]
    log = (jdir / "output.log").read_bytes()
    assert len(docs) == 3 and all(d["job_id"] == job_id for d in docs)
    for d in docs:  # offsets are byte offsets into output.log
        assert log[d["offset"]:].startswith(d["line"].encode())

    r = run_cli("tail", job_id, "--host", "local", "--since", "1d")
    assert r.stdout.encode() == log
    r = run_cli("tail", job_id, "--host", "local", "--since", "yesterday")
    assert r.returncode == 2 and "neither a duration nor a date" in r.stderr


def test_offset_since_index_markers_and_mtime(tmp_path: Path) -> None:
    """The time → offset rule: the size index first, else attempt markers; a stale log gives its end."""
    from remote.core.layout import JobDir
    from remote.jobs.logindex import offset_since

    job = JobDir(tmp_path / "j")
    job.path.mkdir()
    t0 = time.mktime(time.strptime("2026-01-02 03:04:05", "%Y-%m-%d %H:%M:%S"))
    text = (b"==> gpujob: attempt 1 started [2026-01-02 03:04:05]\nold 1\nold 2\n"
            b"==> gpujob: attempt 2 started [2026-01-02 04:00:00]\nnew 1\n")
    job.log.write_bytes(text)
    second = text.index(b"==> gpujob: attempt 2")
    assert offset_since(job, t0 - 10) == 0
    assert offset_since(job, t0 + 3600) == second  # the newest marker at or before the time
    (job.path / "output.log.idx").write_text(f"{t0 + 1:.3f} 55\n{t0 + 5000:.3f} {len(text)}\n")
    assert offset_since(job, t0 + 2) == text.index(b"old 1") + len(b"old 1\n")  # 55 is mid-line: next line start
    os.utime(job.log, (t0 + 6000, t0 + 6000))
    assert offset_since(job, t0 + 7000) == len(text)  # nothing written since
