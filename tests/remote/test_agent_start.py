"""The agent's own start (issue 38): a first ``gpujob status`` (``ls``, ``tail``; the install probe's
``hello``) runs its verb as a fresh ``python -S -m remote`` on the instance, so whatever that process
imports or builds is paid by every such command. Checked on the installed agent, run with the
client's own command line (``Agent.command``) and ``python -X importtime``, which lists every
module a process imported; benchmarks/cli/agent_start.py times it against ``cat``."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from gpujob.config.hosts import local_host
from gpujob.transport import connect
from gpujob.transport.agent import Agent
from tests.helpers import remote_root, submit, wait_for, wait_state, write_job

# what only other verbs need (starting processes, a stop's signals, nvidia-smi, removing files, a torch
# archive's check, the median interval of checkpoints, a new job id, an error's traceback for the log):
# each was imported by every verb's start
NOT_FOR_A_LOOK = {"subprocess", "threading", "signal", "shutil", "bz2", "lzma", "zipfile", "statistics",
                  "decimal", "fractions", "random", "traceback", "tokenize"}

RUNNING = """
    import os, pathlib, time
    ck = pathlib.Path(os.environ["GPUJOB_CKPT_DIR"]) / "step-1"
    ck.mkdir()
    (ck / "weights.bin").write_bytes(b"w" * 1000)
    (ck / ".gpujob-complete").write_text("")
    for i in range(100000):
        print("step", i, "loss", 1.0 / (i + 1), flush=True)
        time.sleep(0.1)
"""


def imported(verb: str, args: list[str]) -> tuple[set[str], str]:
    """Modules the installed agent's ``verb`` imported, run as the client runs it; and its stdout."""
    cmd = Agent(connect(local_host())).command(verb, args)
    assert " -S -m remote " in cmd, cmd
    r = subprocess.run(["/bin/sh", "-c", cmd.replace(" -S -m remote ", " -S -X importtime -m remote ")],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:]
    mods = {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    return mods - {"imported package"}, r.stdout


def test_a_first_commands_verb_imports_only_what_it_uses(tmp_path: Path) -> None:
    """status (a running job with a checkpoint, a finished one), the listing, a log's tail and hello
    import none of the modules only other verbs use; each still answers as before."""
    done = submit("local", write_job(tmp_path, "done", "print('step 1 loss 0.5')", "python main.py"))["job_id"]
    run = submit("local", write_job(tmp_path, "run", RUNNING, "python main.py"))["job_id"]
    log = remote_root(tmp_path, "local") / "jobs" / run / "output.log"
    wait_for(lambda: log.exists() and "step 3 " in log.read_text(), 60, "the running job's lines")
    wait_state("local", done, ("succeeded",), 60)
    for verb, args in (("status", ["--job", run]), ("status", ["--job", done]), ("status", []),
                       ("logs", ["--job", run, "--lines", "2"]), ("hello", [])):
        mods, out = imported(verb, args)
        assert "json" in mods and "remote.verbs.answer" in mods, (verb, sorted(mods))  # importtime saw the start
        assert not mods & NOT_FOR_A_LOOK, (verb, args, sorted(mods & NOT_FOR_A_LOOK))
        if verb == "logs":
            assert out.startswith(f"gpujob-log {run} ") and "loss" in out, out[:300]
            continue
        doc = json.loads(out)
        if args:
            st = doc["jobs"][0]
            assert st["job_id"] == args[1] and st["state"] == ("running" if args[1] == run else "succeeded"), st
        if args[1:] == [run]:
            assert [c["name"] for c in st["checkpoints"]] == ["step-1"] and "loss" in st["last_line"], st
        if verb == "status" and not args:
            assert {j["job_id"] for j in doc["jobs"]} == {run, done}, doc
        if verb == "hello":
            assert doc["root"] == str(remote_root(tmp_path, "local")), doc


def test_the_agent_builds_the_running_verbs_parser_alone() -> None:
    """A verb's process builds that verb's parser, not the thirty others (argparse's objects and their
    message-catalogue look-ups were a third of a short verb's start); its usage, help and errors are the
    whole parser's; a command line without a verb it knows gets the whole parser."""
    from remote.__main__ import VERBS, build_parser, verb_of

    def verbs(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices

    full = build_parser()
    assert list(verbs(full)) == list(VERBS)  # the table's order is the parser's: the usage line names them so
    for name, sp in verbs(full).items():
        for argv in (["--root", "/r", name], ["--root=/r", name], [name, "--root", "/r"]):
            assert verb_of(argv) == name, argv
        alone = build_parser(verb_of(["--root", "/r", name]))
        assert set(verbs(alone)) == {name}, name
        assert verbs(alone)[name].format_help() == sp.format_help() and alone.format_usage() == full.format_usage(), name
    assert build_parser(verb_of(["--root", "/r", "status", "--job", "j"])).parse_args(
        ["--root", "/r", "status", "--job", "j"]) == full.parse_args(["--root", "/r", "status", "--job", "j"])
    for argv in (["--root", "/r", "statsu"], ["-h"], ["--root", "/r"], []):
        assert verb_of(argv) is None, argv  # the whole parser: its "invalid choice" or help names every verb
