"""What a job or a host wrote never drives the user's terminal (issue 25 item 4).

A job prints OSC 52 (clipboard), CSI 2J (clear screen) and OSC 0 (window title), names a
metric with them and fails with them in its error; every command that shows it runs under a
real pty, as on a user's terminal, and what the terminal received holds none of them."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO
from tests.helpers import submit, wait_state, write_job

EVIL = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\x1b]0;title\x07\x9b2J\x1b[38;5;201m"
SCRIPT = f'''
import json, os
evil = {EVIL!r}
print("hello " + evil + " world", flush=True)
with open(os.environ["GPUJOB_METRICS_FILE"], "a") as m:
    m.write(json.dumps({{"step": 1, "loss": 0.5, "acc" + evil: 0.25}}) + "\\n")
raise RuntimeError("bad " + evil)
'''
OSC = [b"\x1b]", b"\x07", b"52;c;", b"title"]  # clipboard and title: stripped even with --raw
FORBIDDEN = OSC + [b"\x1b[2J", "\x9b".encode(), b"\x1b[38;5;201m"]


def on_a_pty(*args: str, timeout: float = 240) -> tuple[int, bytes]:
    """``gpujob ARGS`` with a pty as its terminal (stdout and stderr): its exit code and every byte it wrote.
    ``timeout`` only bounds a hung command: a 12 MB profile takes a minute to read on 2 busy cores."""
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(REPO), TERM="xterm-256color", COLUMNS="200", LINES="50")
    p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", *args], stdin=subprocess.DEVNULL, stdout=slave,
                         stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 0.5)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the pty's other end is closed: the process is gone
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    return p.wait(timeout=10), out


def test_escape_sequences_from_a_job_never_reach_the_terminal(tmp_path: Path) -> None:
    job = write_job(tmp_path, "evil", SCRIPT, "python main.py")
    job_id = submit("local", job)["job_id"]
    st = wait_state("local", job_id, ("failed",), 60)
    assert "acc" + EVIL in json.dumps(st) or any(k.startswith("acc") for k in st.get("last_metrics") or {}), st
    for args in (("status", job_id), ("status", job_id, "-w"), ("ls",), ("tail", job_id), ("tail", job_id, "--raw"),
                 ("tail", job_id, "-n", "50", "--grep", "hello")):
        rc, out = on_a_pty(*args, "--host", "local")
        assert rc in (0, 1), (args, rc, out)
        assert b"hello" in out or b"evil" in out, (args, out)
        for bad in OSC if "--raw" in args else FORBIDDEN:
            assert bad not in out, (args, bad, out)
    rc, out = on_a_pty("tail", job_id, "--raw", "--host", "local")
    assert b"\x1b[38;5;201m" in out  # --raw on a terminal keeps the colours, never the OSC strings
    rc, out = on_a_pty("status", job_id, "--host", "local")
    assert b"acc=0.25" in out and b"RuntimeError: bad" in out, out  # the text itself is still shown


def test_exec_output_cannot_drive_the_terminal() -> None:
    """``gpujob exec HOST -- cat output.log`` printed a job's (or the host's) bytes raw: OSC 52 wrote
    the clipboard. On a terminal colours still pass, OSC strings never; a pipe gets the bytes as they are."""
    cmd = r"printf 'a\033]52;c;cHduZWQ=\007b\033]0;title\007 \033[31mred\033[0m\n'"
    rc, out = on_a_pty("exec", "local", "--", cmd)
    assert rc == 0 and b"ab" in out and b"\x1b[31mred" in out, out
    for bad in OSC:
        assert bad not in out, (bad, out)
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", "exec", "local", "--", r"printf '\033]0;t\007\377'"],
                       capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60)
    assert r.returncode == 0 and r.stdout == b"\x1b]0;t\x07\xff", r  # a pipe, a file: the bytes as they are
