"""One of each, on both sides (read from the source with ``ast``, imports inside functions included):

- no private name (``_x``) is imported from another file: what two files share is public;
- ``flock`` is called only in ``remote/core/filelock.py`` (the laptop takes it through ``import_remote``);
- a process group is signalled only in ``remote/core/procs.py``, whose ``end`` is the one
  SIGTERM → wait → SIGKILL loop;
- the stop protocol's side files are named only in ``remote/core/layout.py`` (``JobDir``).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TREES = ("gpujob", "remote", "templates/runtime")
STOP_FILES = {".watch", ".acted", ".ended", "STOP.watch", "STOP.acted", "STOP.ended", "stop.after"}


def sources(*trees: str) -> dict[str, ast.Module]:
    return {str(p.relative_to(REPO)): ast.parse(p.read_text(), str(p))
            for t in trees for p in sorted((REPO / t).rglob("*.py"))}


def private(name: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in name.split("."))


def test_no_private_name_is_imported_from_another_file() -> None:
    found = []
    for path, tree in sources(*TREES).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                found += [f"{path}:{node.lineno} {node.module} {a.name}" for a in node.names if private(a.name)]
            elif isinstance(node, ast.Import):
                found += [f"{path}:{node.lineno} {a.name}" for a in node.names if private(a.name)]
    assert not found, "private names imported across files (make them public, or move the code):\n" + "\n".join(found)


def calls_of(attr: str, tree: ast.Module) -> list[int]:
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr]


def test_flock_is_called_only_in_the_lock_module() -> None:
    found = {p: lines for p, t in sources(*TREES).items() if (lines := calls_of("flock", t))}
    assert set(found) == {"remote/core/filelock.py"}, found


def test_a_process_group_is_signalled_only_in_procs() -> None:
    found = {p: lines for p, t in sources(*TREES).items() if (lines := calls_of("killpg", t))}
    assert set(found) == {"remote/core/procs.py"}, found


def test_the_stop_files_are_named_only_on_jobdir() -> None:
    found = [f"{p}:{n.lineno} {n.value!r}" for p, t in sources("remote", "gpujob").items() if p != "remote/core/layout.py"
             for n in ast.walk(t) if isinstance(n, ast.Constant) and n.value in STOP_FILES]
    assert not found, found
