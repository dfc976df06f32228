"""The laptop's loads of agent code (``gpujob.bundle.import_remote``) are part of its layering: each
names a literal module of a declared set, and takes only public names from what it returns (a
private name of ``remote/`` is the agent's to change). Read from the source with ``ast``."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from tests.gpujob.test_layers import PKG

REMOTE = PKG.parent / "remote"
# The agent modules the laptop may load: pure helpers and constants it shares with the agent.
LOADED = {
    "core.atomicfile",  # atomic writes
    "core.filelock",  # the one file lock (mux's starter, pull's folder, the MLflow exporter)
    "core.procs",  # the one TERM, wait, KILL loop (a timed-out helper command's group)
    "core.protocol",  # durations, job states, verbs served
    "core.spec",  # the job spec's defaults
    "core.sections",  # the spec's typed sections (autostop, mirror, notify): their defaults, stated once
    "core.specfields",  # what a spec field is (kind, default, bounds): the laptop's validator walks them
    "data.codehash",  # one file's part of the code hash
    "data.datashape",  # a dataset's shape
    "data.transfer",  # a checkpoint's file list, sent from a local copy
    "env.interpreter",  # the run command's interpreter
    "host.gpus",  # what counts as a free GPU
    "mirror.config", "mirror.engine", "mirror.store", "mirror.version",  # the checkpoint mirror
    "notify",  # the channels' bodies, signatures, redaction
    "run.autostop",  # the autostop section's check
    "stream",  # the sync's wire format and tree digests
    "view.statusdoc",  # the status document's fields, declared once (reply check, typed views)
}


def is_load(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == "import_remote")
        or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_remote"))


def loads(path: Path) -> tuple[list[str], list[str]]:
    """(modules ``path`` loads, problems: a load of no literal name, a private name taken)."""
    tree = ast.parse(path.read_text(), str(path))
    names, bad = [], []
    bound: set[str] = set()  # names a load's module is kept in (``notify = import_remote("notify")``)
    for node in ast.walk(tree):
        if is_load(node):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names.append(arg.value)
            else:
                bad.append(f"{path.name}:{node.lineno}: import_remote of no literal name")
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                pairs = (zip(target.elts, node.value.elts)
                         if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                         else [(target, node.value)])
                bound.update(t.id for t, v in pairs if isinstance(t, ast.Name) and is_load(v))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and (is_load(node.value) or (isinstance(node.value, ast.Name) and node.value.id in bound))):
            bad.append(f"{path.name}:{node.lineno}: takes the agent's private {node.attr}")
    return names, bad


@cache
def every_load() -> tuple[dict[str, set[str]], list[str]]:
    """module loaded -> the laptop files loading it; the problems found."""
    used: dict[str, set[str]] = {}
    problems = []
    for path in sorted(PKG.rglob("*.py")):
        if path == PKG / "bundle.py":
            continue  # import_remote itself
        names, bad = loads(path)
        for n in names:
            used.setdefault(n, set()).add(str(path.relative_to(PKG.parent)))
        problems += [f"{path.relative_to(PKG.parent)}: {b.partition(':')[2]}" for b in bad]
    return used, problems


def test_the_laptop_loads_only_declared_agent_modules() -> None:
    used, problems = every_load()
    extra = {m: sorted(f) for m, f in used.items() if m not in LOADED}
    assert not extra, f"agent modules loaded but not declared in LOADED ({__file__}): {extra}"
    assert not problems, "\n".join(problems)


def test_every_declared_module_is_the_agents_and_loaded() -> None:
    used, _ = every_load()
    missing = [m for m in sorted(LOADED) if not (REMOTE / (m.replace(".", "/") + ".py")).is_file()
               and not (REMOTE / m.replace(".", "/") / "__init__.py").is_file()]
    assert not missing, f"not modules of remote/: {missing}"
    assert set(used) == LOADED, f"declared, no longer loaded: take them off LOADED: {sorted(LOADED - set(used))}"


def test_the_check_sees_a_private_name_and_an_undeclared_load(tmp_path: Path) -> None:
    src = tmp_path / "x.py"
    src.write_text("from gpujob.bundle import import_remote\nnotify = import_remote('notify')\n"
                   "def f(m):\n    a, b = import_remote('core.spec'), import_remote(m)\n"
                   "    return notify._names(), import_remote('data.codehash')._digest, a._x, a.STOP_WAIT\n")
    names, bad = loads(src)
    assert sorted(names) == ["core.spec", "data.codehash", "notify"]
    assert sorted(b.split(": ", 1)[1] for b in bad) == [
        "import_remote of no literal name", "takes the agent's private _digest", "takes the agent's private _names",
        "takes the agent's private _x"]
