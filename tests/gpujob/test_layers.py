"""No laptop module imports a higher layer (docs/DESIGN.md): read from the source with ``ast``,
imports inside functions included, so a lazy import cannot hide an upward one."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "gpujob"
# lower number = lower layer; a module may import its own layer or lower ones
RANK = {"foundation": 0, "transport": 1, "config": 2, "usecases": 3, "api": 4, "ui": 5, "dashboard": 5, "cli": 6}
FOUNDATION = {"errors", "exitcodes", "bundle", "backoff", "version", "helpercmd", "userdirs", "jsontypes"}

# Upward imports allowed for now: none. A refactor that cannot finish in one step lists its
# (importer, imported) pairs here; the second test fails once one is gone, so it cannot go stale.
KNOWN: set[tuple[str, str]] = set()


def layer(module: str) -> str:
    """The layer of ``gpujob.x.y`` (the package itself is the API's facade)."""
    parts = module.split(".")
    if parts == ["gpujob"]:
        return "api"
    if parts[1] == "__main__":
        return "cli"
    if parts[1] in RANK:
        return parts[1]
    assert parts[1] in FOUNDATION, f"{module}: not in a layer folder nor a foundation module: add it to a layer"
    return "foundation"


def module_of(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path, module: str) -> set[str]:
    """Every gpujob module ``path`` imports, wherever the import statement sits."""
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "gpujob")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.split(".")[0] != "gpujob":
                continue
            for a in node.names:  # ``from gpujob import transport`` imports the subpackage
                sub = f"{base}.{a.name}"
                out.add(sub if (PKG.parent / sub.replace(".", "/")).exists()
                        or (PKG.parent / (sub.replace(".", "/") + ".py")).exists() else base)
    return out


def violations() -> set[tuple[str, str]]:
    found = set()
    for path in sorted(PKG.rglob("*.py")):
        mod = module_of(path)
        mine = layer(mod)
        for target in imported(path, mod):
            theirs = layer(target)
            if theirs == "ui" and mine not in ("ui", "cli", "dashboard"):
                found.add((mod, target))  # ui draws: only the CLI (and the dashboard, the other view) may call it
            elif theirs != "ui" and RANK.get(theirs, 0) > RANK.get(mine, 0) and theirs != "foundation":
                found.add((mod, target))
    return found


def test_no_module_imports_a_higher_layer() -> None:
    bad = violations() - KNOWN
    assert not bad, "upward imports (cli > api > usecases > config > transport > foundation; ui only from cli and dashboard):\n" + "\n".join(
        f"  {a} imports {b}" for a, b in sorted(bad))


def test_no_import_cycle() -> None:
    """No chain of imports (in-function ones too, like the facade's lazy API) comes back to its
    start: a cycle is a layering mistake that only an import inside a function hides."""
    graph = {module_of(p): imported(p, module_of(p)) for p in sorted(PKG.rglob("*.py"))}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt == node or nxt not in graph:
                continue
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [node, nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [])
    assert not cycles, "import cycles:\n" + "\n".join("  " + " -> ".join(c) for c in cycles)


def test_the_allow_list_holds_only_what_is_still_there() -> None:
    gone = KNOWN - violations()
    assert not gone, f"fixed, so take them off KNOWN in {__file__}: {sorted(gone)}"


def test_the_instance_side_imports_nothing_of_the_laptop() -> None:
    """``remote/`` runs on the instance, where no ``gpujob`` package is installed."""
    remote = PKG.parent / "remote"
    bad = [f"{p.relative_to(remote.parent)} imports {m}" for p in sorted(remote.rglob("*.py"))
           for m in imported(p, "remote." + p.stem)]
    assert not bad, bad


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    src = tmp_path / "gpujob" / "transport" / "x.py"
    src.parent.mkdir(parents=True)
    src.write_text("def f():\n    from gpujob.config.hosts import Host\n    import gpujob.usecases.jobs.ops\n")
    assert imported(src, "gpujob.transport.x") == {"gpujob.config.hosts", "gpujob.usecases.jobs.ops"}
