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


def imported(*args: str) -> set[str]:
    """Top-level packages that ``gpujob ARGS`` imported."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpujob.cli", *args], capture_output=True, text=True,
                       env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:]
    mods = set()
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                mods.add(name.split(".")[0])
    return mods


def test_help_imports_nothing_heavy() -> None:
    assert not imported("--help") & HEAVY
    assert not imported("tail", "--help") & HEAVY


def test_ls_on_local_needs_no_ssh() -> None:
    assert not imported("ls", "--json") & HEAVY
    mods = imported("ls")  # the table is drawn with rich; still no SSH, HTTP or torch
    assert "rich" in mods and not mods & (HEAVY - {"rich"})


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


def test_json_errors_are_json() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", "status", "nosuchjob", "--host", "local", "--json"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode != 0
    doc = json.loads(r.stdout)
    assert doc["error"] and "remedy" in doc and doc["kind"]
