"""A hostile program in place of the agent cannot exhaust, crash or stall the laptop (issue 25
item 5): huge, deep, wrong-shaped and missing replies, over a direct connection and over the
kept (multiplexed) one. The program is put where the agent's interpreter is recorded
(``<root>/agent/<version>/python``), so every verb runs it, over the test's real sshd."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.helpers import wait_for

HOSTILE = r'''#!{python}
import json, sys, time
mode = open({mode!r}).read().strip()
kept = "serve" in sys.argv  # the kept agent: one request line, one answer line each, its output wrapped
if kept:
    sys.stdin.buffer.readline()
DOCS = {{"deep": "[" * 200000 + "]" * 200000, "shape": '{{"jobs": 5}}',
        "shape2": '{{"jobs": [{{"job_id": "j", "state": "running", "last_metrics": [1, 2]}}]}}'}}

def answer():
    out = sys.stdout.buffer
    if mode == "huge":  # 2 GB, as fast as the reader takes it
        out.write(b'{{"rc": 0, "err": "", "out": "{{\\"jobs\\": [\\"' if kept else b'{{"jobs": ["')
        block = b"a" * (1 << 20)
        for _ in range(2048):
            out.write(block)
    elif mode == "silent":
        time.sleep(3600)
    else:
        doc = DOCS[mode]
        out.write((json.dumps({{"rc": 0, "out": doc + "\n", "err": ""}}) if kept else doc).encode() + b"\n")
    out.flush()

try:
    answer()
    if kept:
        sys.stdin.buffer.readline()
except (BrokenPipeError, OSError):
    pass
'''
MiB = 1 << 20


def _cli(*args: str, env: dict[str, str], timeout: float = 60) -> tuple[subprocess.CompletedProcess, int]:
    """``gpujob ARGS`` and its peak RSS in bytes (measured by a parent that waits for it)."""
    wrapper = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
               "sys.stderr.write('MAXRSS %d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
               "sys.exit(r.returncode)")
    full = dict(os.environ, PYTHONPATH=str(REPO), **env)
    # a session of its own: past the timeout the command is killed with its wrapper, never left behind
    with subprocess.Popen([sys.executable, "-c", wrapper, sys.executable, "-m", "gpujob.cli", *args], text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full, stdin=subprocess.DEVNULL,
                          start_new_session=True) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise
    r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    rss = int(r.stderr.rsplit("MAXRSS ", 1)[1].split()[0]) * 1024
    r.stderr = r.stderr.rsplit("MAXRSS ", 1)[0]
    return r, rss


def _daemon_hwm(mux_dir: Path) -> int | None:
    """The peak RSS (VmHWM) of the test's multiplexer daemon, found by its socket folder."""
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if b"gpujob.transport.muxd" not in (p / "cmdline").read_bytes():
                continue
            if f"GPUJOB_MUX_DIR={mux_dir}".encode() not in (p / "environ").read_bytes():
                continue
            for line in (p / "status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            continue
    return None


def _set_mode(mode: Path, m: str) -> None:
    """Atomically: the kept daemon may start the hostile program while the mode is being written."""
    tmp = mode.with_suffix(".new")
    tmp.write_text(m)
    os.replace(tmp, mode)


@pytest.mark.slow
def test_a_hostile_agent_gets_exit_3_and_bounded_memory(ssh_host: str, tmp_path: Path, mux_dir: Path) -> None:
    r = run_cli("ls", "--host", ssh_host, env_extra={"GPUJOB_MUX": "0"})  # installs the real agent
    assert r.returncode == 0, r.stderr
    [version] = list((tmp_path / "remote-root" / "agent").iterdir())
    mode = tmp_path / "mode"
    prog = tmp_path / "hostile-agent"
    prog.write_text(HOSTILE.format(python=sys.executable, mode=str(mode)))
    prog.chmod(0o755)
    (version / "python").write_text(f"{prog}\n")

    direct = {"GPUJOB_MUX": "0", "GPUJOB_TIMEOUT_STATUS": "3"}
    kept = {"GPUJOB_TIMEOUT_STATUS": "3"}
    expect = {"deep": "nested more than 64 deep", "shape": "'jobs' is not a list",
              "shape2": "'last_metrics' is not an object", "huge": "a reply of more than 16 MiB",
              "silent": "did not answer a command within 3s"}
    rss: dict[str, int] = {}
    for env, how in ((direct, "direct"), (kept, "kept")):
        if how == "kept":  # a first command starts the daemon as it exits; then every call goes through it
            _set_mode(mode, "shape")
            run_cli("ls", "--host", ssh_host, env_extra=kept)
            wait_for(lambda: list(mux_dir.glob("*.sock")), 30, "the kept connection's socket")
            wait_for(lambda: _daemon_hwm(mux_dir), 30, "the kept connection's daemon")
        for m in ("shape", "shape2", "deep", "silent", "huge"):
            _set_mode(mode, m)
            before = _daemon_hwm(mux_dir) if how == "kept" else None
            t0 = time.monotonic()
            r, peak = _cli("ls", "--host", ssh_host, env=env)
            took = time.monotonic() - t0
            assert r.returncode == 3, (how, m, r.returncode, r.stderr)
            assert f"the agent on {ssh_host} answered something gpujob cannot read" in r.stderr or m == "silent", \
                (how, m, r.stderr)
            assert expect[m] in r.stderr, (how, m, r.stderr)
            assert "Traceback" not in r.stderr, r.stderr
            assert took < 30, (how, m, took)  # never the 600 s call timeout
            rss[f"{how} {m}"] = peak
            if how == "kept" and m == "huge":
                after = _daemon_hwm(mux_dir)
                assert before and after and after - before < 64 * MiB, (before, after)
                rss["kept daemon's growth"] = after - before
    for how in ("direct", "kept"):  # 2 GB offered: the laptop read at most its limit
        assert rss[f"{how} huge"] - rss[f"{how} shape"] < 64 * MiB, rss
    print("peak RSS (MiB):", {k: round(v / MiB) for k, v in rss.items()})
