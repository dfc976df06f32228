"""A hostile ``range_serve`` (the process a large upload's channels connect to) cannot exhaust
or crash the laptop: a channel answered with an endless line, or with a line that is not JSON,
ends the submit with exit 3 naming the host, in bounded memory and time. Every other verb is the
real agent's; the program is put where the agent's interpreter is recorded, over the real sshd."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import write_job
from tests.hostile import install_hostile
from tests.security.test_hostile_agent import MiB, _cli

HOSTILE = r'''#!{python}
import os, socket, sys, threading
verb = sys.argv[sys.argv.index("--root") + 2]
if verb != "range_serve":
    real = {real!r}
    os.execv(real, [real] + sys.argv[1:])
mode = open({mode!r}).read().strip()
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(8)

def serve(c):
    f = c.makefile("rb")
    f.readline(), f.readline()  # the token and the channel's header
    try:
        if mode == "flood":  # one line with no end
            block = b"a" * (1 << 20)
            while True:
                c.sendall(block)
        c.sendall(b"not json at all\n")
        c.recv(1 << 16)
    except OSError:
        pass

def accept():
    while True:
        c, _ = srv.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()

threading.Thread(target=accept, daemon=True).start()
sys.stdout.write('{{"port": %d, "token": "t", "have": {{}}}}\n' % srv.getsockname()[1])
sys.stdout.flush()
sys.stdin.read()  # the laptop ends the server with its stdin
'''


@pytest.fixture(autouse=True)
def small_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUJOB_RANGE_MIN", str(6 << 20))
    monkeypatch.setenv("GPUJOB_RANGE_SPAN", "1")
    monkeypatch.setenv("GPUJOB_RANGE_CHANNELS", "2")


def test_a_hostile_range_server_gets_exit_3_in_bounded_memory(ssh_host: str, tmp_path: Path) -> None:
    mode = tmp_path / "mode"
    real = install_hostile(tmp_path, "remote-root", "", ssh_host)
    (tmp_path / "hostile-agent").write_text(HOSTILE.format(python=sys.executable, mode=str(mode), real=real))
    peaks = {}
    for m in ("garbage", "flood"):
        mode.write_text(m)
        job = write_job(tmp_path, m, "print('hi')\n", "python main.py")  # a project each: a failed sync keeps its lease
        (job.parent / "model.bin").write_bytes(os.urandom(9 << 20))
        t0 = time.monotonic()
        r, peaks[m] = _cli("submit", str(job), "--host", ssh_host, env={"GPUJOB_MUX": "0"}, timeout=120)
        assert r.returncode == 3, (m, r.returncode, r.stderr)
        assert f"the agent on {ssh_host} answered something gpujob cannot read" in r.stderr, (m, r.stderr)
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
        assert time.monotonic() - t0 < 30, m
    assert peaks["flood"] - peaks["garbage"] < 64 * MiB, peaks  # a line of no end: read up to its limit
