"""Shell completion: the bash script, sourced in a real bash, completes commands, options,
host names and job ids from the local index (no host contact); the zsh and fish scripts load in
the real shells (skipped where they are not installed) and complete there."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli


@pytest.fixture
def gpujob_on_path(tmp_path: Path) -> dict[str, str]:
    """A ``gpujob`` program on PATH that runs this worktree's code (what the script calls)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "gpujob"
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m gpujob.cli \"$@\"\n")
    exe.chmod(0o755)
    return dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")


def complete(env: dict[str, str], script: Path, *words: str) -> list[str]:
    """COMPREPLY of ``_gpujob`` for the command line ``words`` (the last one is being completed)."""
    arr = " ".join(f"'{w}'" for w in words)
    prog = (f"source {script}\ncomplete -p gpujob\nCOMP_WORDS=({arr}); COMP_CWORD={len(words) - 1}\n"
            "_gpujob\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", prog], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    first, *rest = r.stdout.splitlines()
    assert first == "complete -o default -F _gpujob gpujob"
    return rest


def test_bash_completes_commands_options_hosts_and_jobs(gpujob_on_path: dict[str, str], tmp_path: Path) -> None:
    assert run_cli("host", "add", "gpubox", "--ssh", "ssh -p 2222 root@203.0.113.9", "--no-check").returncode == 0
    r = run_cli("submit", str(REPO / "examples" / "tiny" / "job.yaml"), "--json",
                "--set", "run=echo done", env_extra={"GPUJOB_MAX_STEPS": "1"})
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    r = run_cli("completion", "bash")
    assert r.returncode == 0, r.stderr
    script = tmp_path / "gpujob.bash"
    script.write_text(r.stdout)

    assert {"submit", "status", "completion"} <= set(complete(gpujob_on_path, script, "gpujob", ""))
    assert complete(gpujob_on_path, script, "gpujob", "st") == ["status", "stop"]
    assert "--follow" in complete(gpujob_on_path, script, "gpujob", "tail", "--f")
    jobs = complete(gpujob_on_path, script, "gpujob", "status", "")
    assert job_id in jobs and "tiny" in jobs
    assert complete(gpujob_on_path, script, "gpujob", "tail", job_id[:6]) == [job_id]
    assert "gpubox" in complete(gpujob_on_path, script, "gpujob", "doctor", "")
    assert complete(gpujob_on_path, script, "gpujob", "host", "set", "gpu") == ["gpubox"]
    assert complete(gpujob_on_path, script, "gpujob", "ls", "--host", "g") == ["gpubox"]
    assert complete(gpujob_on_path, script, "gpujob", "move", job_id, "--to", "g") == ["gpubox"]
    assert job_id in complete(gpujob_on_path, script, "gpujob", "move", "")
    assert job_id in complete(gpujob_on_path, script, "gpujob", "compare", job_id, "")  # ledger runs are job ids
    assert complete(gpujob_on_path, script, "gpujob", "host", "off", "gpu") == ["gpubox"]
    assert {"status", "resume"} <= set(complete(gpujob_on_path, script, "gpujob", "sweep", ""))  # or a job file
    assert {"add", "set", "trust"} <= set(complete(gpujob_on_path, script, "gpujob", "host", ""))


def test_zsh_and_fish_scripts(tmp_path: Path) -> None:
    for shell in ("zsh", "fish"):
        r = run_cli("completion", shell)
        assert r.returncode == 0, r.stderr
        path = tmp_path / f"gpujob.{shell}"
        path.write_text(r.stdout)
        exe = shutil.which(shell)
        if exe:  # the shell's own parser accepts the script
            chk = subprocess.run([exe, "-n", str(path)], capture_output=True, text=True, timeout=30)
            assert chk.returncode == 0, chk.stderr
    assert "bashcompinit" in (tmp_path / "gpujob.zsh").read_text()
    fish = (tmp_path / "gpujob.fish").read_text()
    assert "gpujob completion --words jobs" in fish and "gpujob completion --words hosts" in fish
    r = run_cli("completion")
    assert r.returncode == 2 and "bash|zsh|fish" in r.stderr


# zsh completes only in an interactive line editor: drive one on a pseudo-terminal, press Tab after
# the line given, and print what compadd was handed, one "GJM:word" a line
ZSH_DRIVER = r"""
zmodload zsh/zpty zsh/datetime
zpty z zsh -f -i
zpty -w z "PS1=''; autoload -U compinit; compinit -u -D; source ${(q)1}"
zpty -w z 'compadd() { local -a m; builtin compadd -O m "$@"; print -rl -- ${m/#/GJM:} "GJM-END"; builtin compadd "$@"; }'
zpty -w z 'print READY'
zpty -r z line '*READY*'
zpty -r z line '*READY*'
zpty -w -n z "$2"$'\t'
local all="" end=$((EPOCHREALTIME + 30))
while (( EPOCHREALTIME < end )) && [[ $all != *GJM-END* ]]; do
  if zpty -r -t z line; then all+="$line"; else sleep 0.05; fi
done
print -r -- "$all"
zpty -d z
"""


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_complete_in_the_real_shell(shell: str, gpujob_on_path: dict[str, str], tmp_path: Path) -> None:
    exe = shutil.which(shell)
    if not exe:
        pytest.skip(f"{shell} is not installed (.ci/run installs it)")
    r = run_cli("completion", shell)
    assert r.returncode == 0, r.stderr
    script = tmp_path / f"gpujob.{shell}"
    script.write_text(r.stdout)
    env = dict(gpujob_on_path, HOME=str(tmp_path))  # no user rc file, no completion dump of the user's

    def complete_in(line: str) -> list[str]:
        if shell == "fish":
            argv = [exe, "--no-config", "-c", f"source {script}; complete -C {shlex.quote(line)}"]
        else:
            driver = tmp_path / "drive.zsh"
            driver.write_text(ZSH_DRIVER)
            argv = [exe, "-f", str(driver), str(script), line]
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        if shell == "fish":
            return [w.split("\t")[0] for w in out.stdout.splitlines()]
        return [w.split("GJM-END")[0].strip() for w in out.stdout.replace("\r", "").split("GJM:")[1:]]

    assert complete_in("gpujob st") == ["status", "stop"]
    assert {"add", "set", "trust"} <= set(complete_in("gpujob host "))
