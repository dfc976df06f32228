"""The agent (``remote/``) imports only the standard library and itself, without import cycles.

Every import counts, including the ones inside functions: a cycle hidden behind a lazy import
still ties two modules together (neither can be read, tested or loaded by path without the other).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REMOTE = Path(__file__).resolve().parent.parent / "remote"


def modules() -> dict[str, Path]:
    """Dotted name -> file of every module under remote/ (a package by its ``__init__``)."""
    out = {}
    for p in sorted(REMOTE.rglob("*.py")):
        parts = list(p.relative_to(REMOTE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def imports(name: str, path: Path, known: set[str]) -> tuple[set[str], set[str]]:
    """(modules of remote/ that ``name`` imports, top-level names of everything else it imports)."""
    is_pkg = path.name == "__init__.py"
    inner, outer = set(), set()

    def add(target: str) -> None:
        if target.split(".")[0] != "remote":
            outer.add(target.split(".")[0])
            return
        while target not in known:  # remote.stream.tree.tree (a name in a module) -> the module
            target = target.rpartition(".")[0]
        inner.add(target)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for a in node.names:
                sub = f"{base}.{a.name}"
                add(sub if sub in known else base)
    inner.discard(name)
    return inner, outer


def graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    mods = modules()
    edges, foreign = {}, {}
    for name, path in mods.items():
        edges[name], foreign[name] = imports(name, path, set(mods))
    return edges, foreign


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_lazy_and_relative_imports() -> None:
    """The checks below rest on this: imports inside functions and relative ones are edges."""
    edges, _ = graph()
    assert "remote.stream.hashing" in edges["remote.stream.tree"]  # from .hashing import HashCache
    assert "remote.stream" in edges["remote.transfer"]  # from remote.stream import ...
    assert "remote.observe" in edges["remote.__main__"]  # only inside functions


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_remote_has_no_import_cycles() -> None:
    edges, _ = graph()
    found = cycles(edges)
    assert not found, "import cycles in remote/ (move the shared piece into a lower module): " + "; ".join(
        " <-> ".join(c) for c in found)


def test_remote_imports_only_the_standard_library() -> None:
    _, foreign = graph()
    bad = {m: sorted(n for n in names if n not in sys.stdlib_module_names) for m, names in foreign.items()}
    bad = {m: names for m, names in bad.items() if names}
    assert not bad, f"remote/ is standard-library only, but: {bad}"


def test_the_agent_bundle_carries_the_subpackages() -> None:
    """The uploaded tarball (and so the agent's version hash) holds remote/stream/, and the laptop
    loads that package by path with its relative imports."""
    import io
    import tarfile

    from gpujob.bundle import bundle_tar, import_remote

    want = {"remote/" + p.relative_to(REMOTE).as_posix() for p in REMOTE.rglob("*.py")}
    assert "remote/stream/send.py" in want
    with tarfile.open(fileobj=io.BytesIO(bundle_tar())) as tar:
        assert want <= set(tar.getnames())
    stream = import_remote("stream")
    assert stream.write_items.__module__ == stream.__name__ + ".send"
