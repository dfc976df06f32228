"""A sync's manifest from the kept (multiplexed) agent, in a shape gpujob does not read (issue 25
leftover): ``busy`` that is no number, a list where a tree's object is, a ``free_bytes`` string.
Each is the host's fault, said so (exit 3), never an internal error. The program in the agent's
place passes every request through to the real agent's ``serve`` but answers ``manifest`` itself,
over the test's real sshd and the real connection daemon."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import run_cli
from tests.helpers import wait_for, write_job

PROXY = r'''#!{python}
import json, os, subprocess, sys
if "serve" not in sys.argv:
    os.execv({real!r}, [{real!r}] + sys.argv[1:])
real = subprocess.Popen([{real!r}] + sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
for line in sys.stdin.buffer:
    req = json.loads(line)
    if req.get("argv", [""])[0] == "manifest":
        doc = open({mode!r}).read()
        sys.stdout.write(json.dumps({{"rc": 0, "out": doc + "\n", "err": ""}}) + "\n")
    else:
        real.stdin.write(line)
        real.stdin.flush()
        sys.stdout.buffer.write(real.stdout.readline())
    sys.stdout.flush()
'''


def test_a_kept_agents_manifest_of_the_wrong_shape_is_the_hosts_fault(ssh_host: str, tmp_path: Path,
                                                                        mux_dir: Path) -> None:
    r = run_cli("ls", "--host", ssh_host, env_extra={"GPUJOB_MUX": "0"})  # installs the real agent
    assert r.returncode == 0, r.stderr
    [version] = [p for p in (tmp_path / "remote-root" / "agent").iterdir() if (p / "ok").exists()]
    real = (version / "python").read_text().strip()
    mode = tmp_path / "manifest.json"
    prog = tmp_path / "proxy-agent"
    prog.write_text(PROXY.format(python=sys.executable, real=real, mode=str(mode)))
    prog.chmod(0o755)
    (version / "python").write_text(f"{prog}\n")
    run_cli("ls", "--host", ssh_host)  # starts the kept connection as it exits
    wait_for(lambda: list(mux_dir.glob("*.sock")), 30, "the kept connection's socket")
    job = write_job(tmp_path, "shape", "print(1)\n", "python main.py")
    code = "projects/shape/code"
    tree = {"files": {}, "dirs": []}
    cases = {
        "'busy' is not a number": {"busy": "soon"},  # was an internal error (a format of a str)
        f"no manifest of {code!r}": {code: [tree]},
        "'free_bytes' is not a number": {code: tree, "free_bytes": "lots"},
    }
    for said, doc in cases.items():
        mode.write_text(json.dumps(doc))
        r = run_cli("submit", str(job), "--host", ssh_host, timeout=120)
        assert r.returncode == 3, (doc, r.returncode, r.stderr)
        assert f"the agent on {ssh_host} answered something gpujob cannot read" in r.stderr, (doc, r.stderr)
        assert said in r.stderr and "Traceback" not in r.stderr and "internal error" not in r.stderr, \
            (doc, r.stderr)
