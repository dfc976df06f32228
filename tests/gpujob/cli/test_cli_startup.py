"""The CLI starts fast: heavy modules are imported only by the commands that use them.

Checked with ``python -X importtime``, which lists every module a process imported.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from tests.conftest import REPO

HEAVY = {"torch", "transformers", "lightning", "pytorch_lightning", "paramiko", "httpx", "rich", "matplotlib", "tensorboard", "numpy", "fabric", "cryptography"}
HEAVY |= {"pathspec"}  # light, but only a sync needs it
HEAVY |= {"starlette", "uvicorn", "anyio", "playwright"}  # only `gpujob ui` serves


def imported(*args: str, rc: int = 0, env_extra: dict[str, str] | None = None, full: bool = False) -> set[str]:
    """Top-level packages (``full``: modules) that ``gpujob ARGS`` imported (it exits with ``rc``)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), **(env_extra or {}))
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpujob.cli", *args], capture_output=True, text=True,
                       env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == rc, r.stderr[-2000:]
    mods = set()
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                mods.add(name if full else name.split(".")[0])
    return mods


def test_help_imports_nothing_heavy() -> None:
    assert not imported("--help") & HEAVY
    assert not imported("tail", "--help") & HEAVY


def test_ls_on_local_needs_no_ssh() -> None:
    assert not imported("ls", "--json") & HEAVY
    mods = imported("ls")  # the table is drawn with rich; still no SSH, HTTP or torch
    assert "rich" in mods and not mods & (HEAVY - {"rich"})


def test_ls_and_status_leave_the_agent_packer_unloaded() -> None:
    """``gpujob.bundle`` is imported by every job command (its ``import_remote``); only an agent's
    install packs the bundle, so ``tarfile`` (and its ``copy``, ``pwd``, ``grp``) loads there alone."""
    imported("ls", "--json")  # the first command to the host installs its agent (and may pack the bundle)
    for args in (("ls", "--json"), ("status", "nosuchjob", "--host", "local", "--json")):
        mods = imported(*args, rc=0 if args[0] == "ls" else 2, full=True)
        assert "gpujob.bundle" in mods and "tarfile" not in mods, args


def test_a_command_builds_its_own_parser_alone() -> None:
    """A process given a command builds that command's parser, not the other forty (a tenth of a
    status's CPU); each one-command parser is the same as the whole parser's for that command, and
    a name that is no command gets the whole parser (its 'did you mean')."""
    from gpujob.cli.parser import build_parser

    def commands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices

    full = commands(build_parser())
    assert {"status", "ls", "tail", "host", "runs"} <= set(full)
    for name, sp in full.items():
        alone = commands(build_parser(name))
        assert set(alone) == {name} and alone[name].format_help() == sp.format_help(), name
    assert set(commands(build_parser("statsu"))) == set(full)


def test_the_secrets_file_reader_leaves_http_unloaded() -> None:
    """Every submit and sync reads the secrets file (usecases/secrets/file.py): httpx (a tenth of a
    second) loads only when the laptop itself sends a notification."""
    code = ("import sys, gpujob.usecases.notify.send, gpujob.usecases.launch.submit, gpujob.usecases.secrets.never_sent; "
            "assert 'httpx' not in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0, r.stderr[-2000:]


def test_every_command_takes_json() -> None:
    from gpujob.cli import build_parser

    missing = []

    def walk(p: argparse.ArgumentParser, path: list[str]) -> None:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    walk(sp, path + [name])
                return
        if "--json" not in p._option_string_actions:
            missing.append(" ".join(path))

    walk(build_parser(), [])
    assert not missing


def test_help_groups_every_command_and_explains_every_argument() -> None:
    """``gpujob --help`` lists each command once, in a group (none left in "more"); every argument of
    every command has a help line and a positional is written as its help texts write it (JOB)."""
    from gpujob.cli import build_parser
    from gpujob.cli.parser import COMMAND_GROUPS

    p = build_parser()
    commands = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices
    grouped = [n for _, names in COMMAND_GROUPS for n in names]
    assert sorted(grouped) == sorted(commands)
    text = p.format_help()
    assert "\nmore:" not in text and all(f"\n{title}:" in text for title, _ in COMMAND_GROUPS)
    bare = []

    def walk(p: argparse.ArgumentParser, path: list[str]) -> None:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    walk(sp, path + [name])
            elif not a.help or (not a.option_strings and a.metavar == a.dest):
                bare.append(f"{' '.join(path)} {a.option_strings or a.dest}")

    walk(p, [])
    assert not bare


def test_json_errors_are_json() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", "status", "nosuchjob", "--host", "local", "--json"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode != 0
    doc = json.loads(r.stdout)
    assert doc["error"] and "remedy" in doc and doc["kind"]


def test_status_over_ssh_never_loads_invoke(ssh_host: str) -> None:
    """A first command to a host imports paramiko, but neither ``importlib.metadata`` nor the
    ``invoke`` that paramiko's ssh_config reader pulls in for ``Match exec`` (a third of
    paramiko's import time), nor the YAML parser once the profiles have their JSON copy."""
    from gpujob.config.hosts import HostStore

    path = HostStore().path
    old = os.stat(path).st_mtime_ns - 60 * 10**9  # a profile file left alone for a minute
    os.utime(path, ns=(old, old))
    HostStore().get(ssh_host)  # reads hosts.yaml once: its JSON copy is written
    for env in ({"GPUJOB_MUX": "0"}, {}):  # a connection of its own; the first command (no daemon yet)
        mods = imported("status", "nosuchjob", "--host", ssh_host, "--json", rc=2, env_extra=env, full=True)
        assert "paramiko.config" in mods
        # the blocked import is tried (importtime lists the attempt) but loads none of invoke's modules
        assert not {m for m in mods if m.startswith("invoke.")}
        assert "importlib.metadata" not in mods  # paramiko asks it only for its own version (paramiko_load)
        assert "yaml" not in mods  # the profiles came from their JSON copy (hosts.yaml unchanged since)


def loaded_by(*args: str, rc: int = 0) -> set[str]:
    """Every module in ``sys.modules`` after ``gpujob ARGS`` ran (``-X importtime`` misses what
    ``importlib.import_module`` loads, as the lazy result classes are)."""
    code = ("import json, sys\nfrom gpujob.cli import main\nrc = main(sys.argv[1:])\n"
            "sys.stderr.write('\\nMODULES ' + json.dumps(sorted(sys.modules)) + '\\n')\nsys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == rc, r.stderr[-2000:]
    return set(json.loads(r.stderr.rsplit("MODULES ", 1)[1]))


def test_a_json_answer_loads_neither_the_drawing_nor_other_verbs_results() -> None:
    """``ls --json`` (and ``status --json``, the same path) builds its document's result class alone and
    draws nothing: the table's modules and the other verbs' result classes (each frozen dataclass ~1 ms
    to make) stay unloaded, while the drawn ``ls`` does load its table."""
    mods = loaded_by("ls", "--json")
    assert "gpujob.api.results.jobs" in mods
    assert not mods & {"gpujob.api.results.actions", "gpujob.api.results.costs", "gpujob.api.results.experiments",
                       "gpujob.ui.jobs", "gpujob.ui.plaintable", "rich"}
    assert {"gpujob.ui.jobs", "gpujob.ui.plaintable"} <= loaded_by("ls")
