"""A hostile agent that floods stderr (384 MiB) while it answers a streaming verb cannot grow the
laptop's memory: only the end of a command's stderr is kept (it says why), on a direct
connection and on the kept one. ``tail`` of a job still shows the log's lines."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.hostile import install_hostile
from tests.security.test_hostile_agent import MiB, _cli

HOSTILE = r'''#!{python}
import sys
verb = sys.argv[sys.argv.index("--root") + 2]
out, err = sys.stdout.buffer, sys.stderr.buffer
if verb == "logs":
    out.write(b"gpujob-log j-1 0\nhello from the job\n")
    out.flush()
    block = b"e" * (1 << 20)
    for _ in range(384):
        err.write(block)
    err.flush()
else:
    out.write(b"{{}}\n")
'''


def test_a_stderr_flood_is_not_kept(ssh_host: str, tmp_path: Path) -> None:
    install_hostile(tmp_path, "remote-root", HOSTILE.format(python=sys.executable), ssh_host)
    r, small = _cli("ls", "--host", ssh_host, env={"GPUJOB_MUX": "0"})
    r, peak = _cli("tail", "j-1", "--host", ssh_host, env={"GPUJOB_MUX": "0"}, timeout=120)
    assert r.returncode == 0 and "hello from the job" in r.stdout, (r.returncode, r.stderr[-500:])
    assert peak - small < 64 * MiB, (peak >> 20, small >> 20)  # 384 MiB offered on stderr
