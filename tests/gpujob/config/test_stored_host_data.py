"""Host answers kept in the profile pass one gate (config/hostdata.py): the preflight's ``bench`` reply is
shape-checked and size-bounded as it arrives, as every reply is, and again when a profile is read back;
a bad kept value is dropped with one warning, never fatal, never drawn as terminal markup (a hostile
program in place of the agent's bench, over the test's real sshd; ``host ls`` on a real pty)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import run_cli
from tests.hostile import install_hostile
from tests.security.test_terminal_injection import on_a_pty

HOSTILE = r'''#!{python}
import os, sys
verb = sys.argv[sys.argv.index("--root") + 2]
mode = open({mode!r}).read().strip()
if verb != "bench" or mode == "real":
    real = {real!r}
    os.execv(real, [real] + sys.argv[1:])
link = "[link=https://evil.example/]99[/link]"
DOCS = {{"shape": '{{"at": 1, "warnings": 5, "gpus": 7}}',
        "markup": '{{"at": 1, "warnings": [], "gpus": [{{"index": 0, "name": "A100", "bf16_pct": "%s"}}]}}' % link,
        "huge": '{{"at": 1, "warnings": ["%s"]}}' % ("x" * (2 << 20))}}
sys.stdout.write(DOCS[mode] + "\n")
'''
LINK = "[link=https://evil.example/]99[/link]"
BAD_KEPT = {"shape": {"at": 1, "warnings": 5, "gpus": 7},
            "markup": {"at": 1, "warnings": [], "gpus": [{"index": 0, "name": "A100", "bf16_pct": LINK}]},
            "huge": {"at": 1, "warnings": ["x" * (2 << 20)]}}
ENV = {"GPUJOB_MUX": "0", "GPUJOB_PREFLIGHT": "0"}


def kept_bench(host: str) -> object:
    r = run_cli("host", "ls", "--json")
    assert r.returncode == 0, r.stderr
    return next(h for h in json.loads(r.stdout) if h["name"] == host).get("bench")


def test_a_bad_bench_reply_is_refused_and_never_kept(ssh_host: str, tmp_path: Path) -> None:
    mode = tmp_path / "mode"
    real = install_hostile(tmp_path, "remote-root", "", ssh_host)
    (tmp_path / "hostile-agent").write_text(HOSTILE.format(python=sys.executable, mode=str(mode), real=real))
    for m in ("shape", "markup", "huge"):
        mode.write_text(m)
        r = run_cli("doctor", ssh_host, "--bench", env_extra=ENV, timeout=120)
        assert r.returncode == 3, (m, r.returncode, r.stderr)
        assert f"the agent on {ssh_host} answered something gpujob cannot read" in r.stderr, (m, r.stderr)
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
        assert kept_bench(ssh_host) is None, m
    mode.write_text("real")  # the real agent's answer is kept, and a submit goes through
    r = run_cli("doctor", ssh_host, "--bench", env_extra=ENV, timeout=180)
    assert r.returncode in (0, 1) and isinstance(kept_bench(ssh_host), dict), r.stderr


def test_a_bad_bench_kept_in_a_profile_is_dropped_with_one_warning(ssh_host: str, tmp_path: Path) -> None:
    from gpujob.config.hosts import HostStore
    from gpujob.config.paths import config_dir

    store = HostStore()
    for m, bad in BAD_KEPT.items():  # as an older gpujob kept it
        h = store.get(ssh_host)
        h.bench = bad
        store.save(h)
        rc, out = on_a_pty("host", "ls")
        assert rc == 0, (m, out[-2000:])
        assert b"\x1b]8;" not in out and b"evil.example" not in out, (m, out[-2000:])  # no OSC 8 link
        said = out.decode(errors="replace")
        assert said.count(f"host {ssh_host}: the bench kept in") == 1, (m, said[-2000:])
        assert f"gpujob doctor {ssh_host} --bench measures the host again" in said, said[-2000:]
        assert "Traceback" not in said and "internal error" not in said
        rc, out = on_a_pty("host", "ls")  # dropped from the profile: said once
        assert rc == 0 and b"the bench kept in" not in out, (m, out[-2000:])
        assert kept_bench(ssh_host) is None
        assert (config_dir() / "hosts.yaml").stat().st_size < 64 << 10, m
    h = store.get(ssh_host)
    h.bench = BAD_KEPT["shape"]
    store.save(h)
    r = run_cli("doctor", ssh_host, "--bench", env_extra=ENV, timeout=180)  # about this very host: measured again
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
    assert isinstance(kept_bench(ssh_host), dict)
