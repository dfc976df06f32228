"""Generated broken input (hypothesis): job files through the spec loader, argument vectors through
the CLI's parser and dispatcher, both in this process. Each ends in a clear error or a valid result,
never another exception. Derandomized, no example database: the same examples on every run."""

from __future__ import annotations

import io
import json
import math
import os
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml

from gpujob.config.spec import (
    MAX_DURATION,
    MAX_GPUS,
    MAX_KEEP,
    MAX_RESTARTS,
    TOP_KEYS,
    JobSpec,
    apply_overrides,
    load_yaml,
    validate,
)
from gpujob.errors import GpujobError

pytest.importorskip("hypothesis", reason="needs hypothesis: pip install -e '.[dev]'")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FUZZ = settings(max_examples=250, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# ---- job files -----------------------------------------------------------------------------------
NUMBERS = st.one_of(
    st.integers(min_value=-5, max_value=70), st.integers(), st.floats(),
    st.sampled_from([10**26, 10**400, -(10**400), 2**63, 1e308, -0.0, 0.5]),
)
WORDS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "\0", "all", "30m", "90s", "1d", "10**32d", "-5s", "nan", ".inf", "1e400", "~nosuchuser/x",
                     "../..", "/", ".", "a" * 300, "[/x]", "${SLACK_URL}", "python train.py", "retry", "halve_batch",
                     "torchrun", "shutdown", "webhook", "http://127.0.0.1:9/x", "5GB", "error", "oom", "eval_loss"]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, WORDS)
SUBKEYS = ["keep", "dir", "logdir", "max_restarts", "on", "backoff", "on_oom", "grace", "channels", "type", "url",
           "timeout", "port", "max_runtime", "budget", "gpu_idle", "below", "for", "stall", "nan_loss", "plateau",
           "metric", "patience", "min_delta", "disk_free_below", "after", "pull_before_shutdown", "check_every",
           "src", "dst", "rn", "gpu"]
KEYS = st.one_of(st.sampled_from(TOP_KEYS + SUBKEYS), WORDS, st.integers(min_value=-2, max_value=2))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(KEYS, inner, max_size=4)), max_leaves=10)
# a valid job with one or two values replaced: most problems are one bad value in a good file
BASE = {"run": "python train.py", "gpus": 1, "retry": {"max_restarts": 2, "backoff": "5s"}, "stop": {"grace": "30s"},
        "checkpoint": {"keep": 2}, "autostop": {"max_runtime": "8h", "gpu_idle": {"below": 5}}}
PATHS = [("gpus",), ("retry", "max_restarts"), ("retry", "backoff"), ("retry", "on"), ("retry", "on_oom"),
         ("stop", "grace"), ("checkpoint", "keep"), ("checkpoint", "dir"), ("autostop", "max_runtime"),
         ("autostop", "budget"), ("autostop", "stall"), ("autostop", "disk_free_below"), ("autostop", "gpu_idle", "below"),
         ("autostop", "plateau"), ("notify", "channels"), ("notify",), ("data",), ("env", "X"), ("env",), ("run",),
         ("name",), ("workdir",), ("exclude",), ("secrets",), ("launcher",), ("nodes",), ("tensorboard", "logdir"),
         ("python",), ("setup",), ("requirements",), ("host",), ("rnu",)]


def _mutate(changes: list[tuple[tuple, object]]) -> dict:
    doc = json.loads(json.dumps(BASE))
    for path, value in changes:
        node = doc
        for k in path[:-1]:
            node = node.setdefault(k, {}) if isinstance(node.get(k, {}), dict) else node
        node[path[-1]] = value
    return doc


# values near the bounds are as likely as wrong types, so valid specs come out too (and get checked)
PLAUSIBLE = st.one_of(st.integers(min_value=-2, max_value=1001), st.floats(min_value=-1, max_value=4e6),
                      st.sampled_from(["0s", "5s", "30m", "8h", "30d", "31d", "365d", "366d", "all", "5GB", "error",
                                       "halve_batch", "torchrun", ["error", "nan"], "~/x", "/root/autodl-fs/ckpt", "x\n", "A\n"]))
MUTATED = st.lists(st.tuples(st.sampled_from(PATHS), st.one_of(PLAUSIBLE, PLAUSIBLE, VALUES)), min_size=1, max_size=2)
SPECS = st.one_of(MUTATED.map(_mutate), MUTATED.map(_mutate), MUTATED.map(_mutate), st.dictionaries(KEYS, VALUES, max_size=8))
# raw text: YAML's own syntax characters, for the parser's error paths
YAML_TEXT = st.text(alphabet="[]{}:,-&*!|>'\"#%@`? \n\tax0.~\\", max_size=120)
OVERRIDES = st.lists(st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["run", "gpus", "retry.backoff", "stop.grace",
                                                                         "data", "env.X", "autostop.budget", "a..b", ""]),
                               st.one_of(WORDS, YAML_TEXT)), max_size=3)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fuzz")
    (d / "data.jsonl").write_text("{}\n")
    return d


def _check(text: str, overrides: list[str], base: Path) -> None:
    """Load as submit does: a ``GpujobError`` or a spec within bounds that the agent can read as JSON."""
    try:
        raw, marks = load_yaml(text, "job.yaml")
        s = validate(apply_overrides(raw, marks, overrides), marks, "job.yaml", base)
    except GpujobError as e:
        assert e.cause and e.remedy and "Traceback" not in str(e)
        return
    assert isinstance(s, JobSpec)
    assert isinstance(s.run, str) and s.run.strip() and "\0" not in s.run
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", s.name), s.name
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) and "\0" not in v for k, v in s.env.items()), s.env
    assert s.gpus in (None, "all") or (type(s.gpus) is int and 0 <= s.gpus <= MAX_GPUS)
    assert 0 <= s.retry.max_restarts <= MAX_RESTARTS and 0 <= s.checkpoint_keep <= MAX_KEEP  # 0: the script rotates its own
    for seconds in (s.retry.backoff, s.stop_grace):
        assert math.isfinite(seconds) and 0 <= seconds <= MAX_DURATION
    json.dumps(s.to_remote(), allow_nan=False)  # what the agent receives: plain, finite JSON


@FUZZ
@given(doc=SPECS, overrides=st.one_of(st.just([]), OVERRIDES))
def test_generated_specs_load_or_fail_clearly(doc: dict, overrides: list[str], base: Path) -> None:
    _check(yaml.safe_dump(doc, allow_unicode=True), overrides, base)


@FUZZ
@given(text=YAML_TEXT)
def test_generated_yaml_text_loads_or_fails_clearly(text: str, base: Path) -> None:
    _check("run: echo\n" + text, [], base)


# ---- argument vectors ----------------------------------------------------------------------------
# Every vector names a host that no profile has (or one whose address is a closed port here), so no
# command touches a host: the run ends in the parser, in validation, or at "unknown host".
NOHOST = ["nohost", "a100x", "Box"]
VALS = st.sampled_from([
    "", " ", "-", "nan", "inf", "-1", "0", "7", "65536", "99999999999999999999", "1e400", "(", "a[", "[/x]", "[bold]",
    "a" * 200, "../evil", ".x", "\udcff", "✓", "${X}", "30m", "off", "true", "vast", "job.yaml", "bad.yaml", "bomb.yaml",
    "data.jsonl", "folder", "nosuch", "gpus=1e400", "retry.backoff=.nan", "run=", "=x", "env=[", "run=\udcff",
    "causal-lm", "custom",
])
TOKENS = st.sampled_from(["--", "-x", "--bogus", "--json", "-f", "-n", "--host", "--set", "--stop"])
_COMMON = ["--interval", "-n", "--lines", "--since", "--grep", "--node", "--wait", "--remote-port", "--local-port",
           "-o", "--best", "--include", "--torch-timeout"]
OPTIONS = {  # each command's options; those in _VALUED take a value
    "submit": ["--set", "-f", "--json"], "status": ["-w", "--interval", "--json"], "ls": ["--json"],
    "tail": ["-f", "-n", "--since", "--grep", "--node", "--json"], "stop": ["--wait", "--json"], "resume": ["--json"],
    "cost": ["--json"], "tunnel": ["--remote-port", "--local-port", "--stop", "--json"], "plot": ["-o"],
    "pull": ["--latest", "--best", "--all", "--include", "--json"], "doctor": ["--torch-timeout", "--json"],
    "agent-log": ["-n", "--json"], "init": ["-t", "--list", "--force", "--json"],
    "data": ["--text-field", "--label-field", "--json"], "notify": ["--json"],
    "host": ["--root", "--preset", "--price", "--identity", "--force", "--shutdown-command", "--idle-shutdown",
             "--tensorboard-port", "--network-turbo", "--hf-endpoint", "--data-disk", "--private-address",
             "--pip-index-url", "--json"],
}
_VALUED = set(_COMMON) | {"--set", "-t", "--text-field", "--label-field", "--root", "--preset", "--price", "--identity",
                          "--shutdown-command", "--idle-shutdown", "--tensorboard-port", "--network-turbo",
                          "--hf-endpoint", "--data-disk", "--private-address", "--pip-index-url"}
SSH_LINES = st.sampled_from(["", "ssh", "hello world", "ssh -p 0 root@h", "ssh -p 22", "ssh -p CLOSED root@127.0.0.1",
                             "root@127.0.0.1:CLOSED", "ssh://root@[::1]:CLOSED", "ssh -o Port=x h", "ssh -J", "ssh root@h;rm"])
PROFILES = ["p1", "p2"]  # host add may create these; their address is a closed port on this machine


def _options(draw: st.DrawFn, cmd: str) -> list[str]:
    out: list[str] = []
    for opt in draw(st.lists(st.sampled_from(OPTIONS[cmd]), max_size=3)):
        out += [opt, draw(VALS)] if opt in _VALUED else [opt]
    return out + draw(st.lists(st.one_of(TOKENS, VALS), max_size=1))  # now and then a stray word


def _vector(draw: st.DrawFn) -> list[str]:
    nohost = draw(st.sampled_from(NOHOST))
    cmd = draw(st.sampled_from(["submit", "status", "ls", "tail", "stop", "resume", "cost", "tunnel", "plot", "pull",
                                "doctor", "agent-log", "init", "data", "notify", "host", "host", "host"]))
    if cmd in ("doctor", "agent-log"):
        return [cmd, nohost] + _options(draw, cmd)
    if cmd == "init":
        return [cmd] + draw(st.lists(VALS, max_size=1)) + _options(draw, cmd)
    if cmd in ("data", "notify"):
        return [cmd, "check" if cmd == "data" else "test"] + draw(st.lists(VALS, max_size=1)) + _options(draw, cmd)
    if cmd == "host":
        action = draw(st.sampled_from(["add", "set", "rm", "trust", "disconnect", "ls"]))
        name = [] if action == "ls" else [draw(st.one_of(st.sampled_from(PROFILES + NOHOST), VALS))]
        ssh = ["--ssh", draw(SSH_LINES).replace("CLOSED", str(_CLOSED))] if action in ("add", "set") else []
        return ["host", action] + name + ssh + (["--no-check"] if action == "add" else []) + (
            _options(draw, "host") if action in ("add", "set") else [])
    positional = [] if cmd in ("ls", "cost") else [draw(st.one_of(VALS, st.just("job-1")))]
    return [cmd] + positional + _options(draw, cmd) + ["--host", nohost]  # the last --host wins


_CLOSED = 1  # replaced by a port where nothing listens, per test


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with the files the vectors name; no multiplexer daemon."""
    global _CLOSED
    from tests.conftest import free_port

    _CLOSED = free_port()
    monkeypatch.setenv("GPUJOB_MUX", "0")
    work = tmp_path / "work"
    (work / "folder").mkdir(parents=True)
    (work / "job.yaml").write_text("run: echo hi\n")
    (work / "bad.yaml").write_text("run: [1, 2]\nretry: {backoff: .nan}\n")
    (work / "bomb.yaml").write_text("a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                                    + "".join(f"a{i}: &a{i} [{', '.join(['*a' if i == 1 else f'*a{i - 1}'] * 10)}]\n"
                                              for i in range(1, 9)) + "run: echo\n")
    (work / "data.jsonl").write_text('{"text": "hi"}\n' + "[" * 5000 + "\n")
    monkeypatch.chdir(work)
    return work


def _run_main(argv: list[str]) -> tuple[object, str, str]:
    """``gpujob.cli.main(argv)`` with stdout and stderr as a terminal-less run has them."""
    from gpujob.cli import main

    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # strict, as a UTF-8 stdout is
    err = io.StringIO()
    code: object
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
        out.flush()
    return code, out.buffer.getvalue().decode("utf-8"), err.getvalue()  # type: ignore[attr-defined]


@FUZZ
@given(argv=st.composite(lambda draw: _vector(draw))())
def test_generated_argument_vectors_end_cleanly(argv: list[str], sandbox: Path) -> None:
    code, out, err = _run_main(argv)
    assert code is None or isinstance(code, int), (argv, code)
    assert code != 70, (argv, err)  # gpujob's "internal error": an exception nobody foresaw
    assert "Traceback" not in out + err, (argv, err)
    if code not in (0, None):
        assert re.search(r"error|unknown|usage", err + out, re.I), (argv, out, err)
    hosts = sandbox.parent / "config" / "hosts.yaml"
    assert not hosts.exists() or "evil" not in hosts.read_text(), argv
    assert os.getcwd() == str(sandbox)
    assert not (sandbox.parent / "local-root").exists(), argv  # nothing ran on the local host either
