"""remote/core/protocol.py is the one definition both sides use: job states, served verbs, durations.

The state strings are what status.json and every ``--json`` output say, so they are pinned here;
the laptop's and the agent's uses are checked against the protocol, and the served verbs against a
real ``serve`` process.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpujob import exitcodes
from gpujob.bundle import import_remote, remote_dir
from remote.core import protocol
from tests.conftest import REPO

laptop = import_remote("core.protocol")  # what the laptop loads: the same file, by path


def test_json_state_strings_did_not_change() -> None:
    # issue 45 added pending and requeued (a Slurm host's): the others keep their spelling
    assert protocol.STATES == ("queued", "pending", "running", "restarting", "requeued", "succeeded", "failed",
                               "stopped", "autostopped", "lost", "moved")
    assert protocol.TERMINAL == ("succeeded", "failed", "stopped", "autostopped", "lost", "moved")
    assert protocol.SETTLED == ("succeeded", "failed", "stopped", "autostopped", "moved")
    assert protocol.ENDINGS == ("succeeded", "failed", "stopped", "autostopped")
    assert protocol.WORST_FIRST == ("failed", "lost", "restarting", "requeued", "running", "queued", "pending",
                                    "stopped", "autostopped", "succeeded")
    assert set(protocol.ACTIVE) | set(protocol.TERMINAL) == set(protocol.STATES)
    assert not set(protocol.ACTIVE) & set(protocol.TERMINAL)


def test_the_laptop_uses_the_protocols_states_and_verbs() -> None:
    from gpujob.transport import agent
    from gpujob.ui.jobs import STATE_STYLE
    from gpujob.usecases.jobs import ops as jobs
    from gpujob.usecases.launch import nodes

    assert laptop.__file__ == protocol.__file__ == str(remote_dir() / "core" / "protocol.py")
    assert agent.SERVED == protocol.SERVED
    assert jobs.FINAL == protocol.TERMINAL
    assert tuple(nodes.ORDER) == protocol.WORST_FIRST
    assert set(STATE_STYLE) == set(protocol.STATES)  # every state drawn in its colour, no stale key
    assert set(exitcodes.BY_STATE) <= set(protocol.TERMINAL)
    assert set(protocol.ENDINGS) | {protocol.LOST} <= set(exitcodes.BY_STATE)


def test_every_way_a_job_ends_can_be_notified() -> None:
    """The supervisor announces each ending under the state's name (remote/run/events.py), and lost."""
    events = import_remote("notify").EVENTS
    assert set(protocol.ENDINGS) | {protocol.LOST} <= set(events)
    # beside the states: the job's other events, and one the laptop sends of a host (a stopped disk's release)
    assert set(events) - set(protocol.STATES) == {"started", "restarted", "gpu_error", "mirror_failing", "test",
                                                  "disk_release"}

def test_every_job_state_the_agent_writes_is_a_protocol_state() -> None:
    """State literals in remote/: ``set_state("x")``, ``finish("x")``, ``state="x"``, ``{"state": "x"}``,
    ``st["state"] = "x"``, ``st.state = "x"``, ``state = "x"`` and comparisons with ``.get("state")`` or a
    record's ``.state`` (remote/core/jobrecord.py)."""
    found: dict[str, set[str]] = {}

    def strings(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.IfExp):
            return strings(node.body) + strings(node.orelse)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [s for e in node.elts for s in strings(e)]
        return []

    def is_state_key(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value == "state"
        if isinstance(node, ast.Subscript):
            return is_state_key(node.slice)
        if isinstance(node, ast.Attribute):
            return node.attr == "state"
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and bool(node.args) and is_state_key(node.args[0]))

    for f in sorted(remote_dir().rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            vals: list[str] = []
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in ("set_state", "finish") and node.args:
                    vals += strings(node.args[0])
                vals += [s for k in node.keywords if k.arg == "state" for s in strings(k.value)]
            elif isinstance(node, ast.Dict):
                vals += [s for k, v in zip(node.keys, node.values) if k is not None and is_state_key(k)
                         for s in strings(v)]
            elif isinstance(node, ast.Assign) and any(is_state_key(t) or getattr(t, "id", "") == "state"
                                                      for t in node.targets):
                vals += strings(node.value)
            elif isinstance(node, ast.Compare) and is_state_key(node.left):
                vals += [s for c in node.comparators for s in strings(c)]
            for v in vals:
                found.setdefault(v, set()).add(f.name)
    assert len(found) >= 9, found  # the scan sees the agent's states at all
    strays = {v: files for v, files in found.items() if v not in protocol.STATES}
    assert not strays, f"states not in remote/core/protocol.py: {strays}"


def test_every_verb_the_laptop_calls_is_one_the_agent_has() -> None:
    from remote.__main__ import build_parser

    sub = next(a for a in build_parser()._actions if a.choices and "serve" in a.choices)
    verbs = set(sub.choices)
    called: set[str] = set()
    for f in (REPO / "gpujob").rglob("*.py"):
        called |= set(re.findall(r"\.(?:call|stream|stream_doc|command)\(\s*\"([a-z_]+)\"", f.read_text()))
    assert {"status", "submit", "watch", "logs", "serve"} <= called, called
    assert called <= verbs, called - verbs
    assert set(protocol.SERVED) <= verbs


def test_a_serve_process_answers_exactly_the_served_verbs(tmp_path: Path) -> None:
    refused = ["submit", "stop", "run", "gc"]
    lines = [{"argv": ["hello"]}] + [{"argv": [v, "--help"]} for v in protocol.SERVED] + [{"argv": [v]} for v in refused]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "remote", "--root", str(tmp_path / "root"), "serve"], cwd=tmp_path,
                       input="".join(json.dumps(x) + "\n" for x in lines), capture_output=True, text=True, env=env,
                       timeout=60)
    answers = [json.loads(x) for x in r.stdout.splitlines()]
    assert r.returncode == 0 and len(answers) == len(lines), r.stderr[-2000:]
    hello = answers[0]
    assert hello["rc"] == 0 and "protocol" in json.loads(hello["out"])
    for verb, a in zip(protocol.SERVED, answers[1:]):
        assert a["rc"] == 0 and f"usage: gpujob-agent {verb}" in a["out"], (verb, a)
    for verb, a in zip(refused, answers[1 + len(protocol.SERVED):]):
        assert a["rc"] == 2 and a["err"] == "serve answers only: {}\n".format(", ".join(protocol.SERVED)), (verb, a)


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("30m", 1800), (" 8h ", 8 * 3600), ("1.5d", 129600),
                                           (5, 5), (2.5, 2.5), ("7", 7)])
def test_durations(text: object, seconds: float) -> None:
    assert protocol.parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["soon", "5w", "-3m", True, float("inf"), 1e309, "", None])
def test_a_bad_duration_names_the_forms(bad: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        protocol.parse_duration(bad)


def test_format_duration() -> None:
    assert [protocol.format_duration(s) for s in (None, 0, 59.9, 61, 3599, 3600, 3723, 90061)] == \
        ["-", "0s", "59s", "1m01s", "59m59s", "1h00m", "1h02m", "25h01m"]


def test_backoff_doubles_up_to_its_cap() -> None:
    assert [protocol.backoff(n, 10) for n in (0, 1, 2, 3, 4)] == [10, 10, 20, 40, 80]
    assert [protocol.backoff(n, 10, 3600) for n in (9, 10, 10_000)] == [2560, 3600, 3600]
    assert protocol.backoff(10_000, 1.0) == 2.0 ** 64  # no OverflowError however many attempts
    assert [protocol.backoff(n, 1, 100, factor=3) for n in (1, 2, 3, 6)] == [1, 3, 9, 100]


def test_the_laptop_waits_by_the_same_formula() -> None:
    from gpujob.backoff import backoff

    assert backoff is protocol.backoff
