"""The agent (``remote/``) imports only the standard library and itself, without import cycles,
and reads top to bottom: each room (a folder) imports only rooms below it.

Every import counts, including the ones inside functions: a cycle hidden behind a lazy import
still ties two modules together (neither can be read, tested or loaded by path without the other).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

REMOTE = Path(__file__).resolve().parents[2] / "remote"

# The rooms of remote/, lowest first (docs/DESIGN.md draws the same picture). A module imports its
# own room and lower ranks only; rooms of one rank are side by side and never import each other.
RANK = {
    "core": 0,  # protocol, errors, layout, locks, procs, atomic files, the job spec, what Slurm says (slurmq)
    "stream": 1, "notify": 1, "mirror": 1, "ckpt": 1, "metrics": 1, "env": 1, "slurm": 1,  # leaves
    "host": 2, "data": 2,  # this instance; a job's files
    "jobs": 3,  # records: store, index, lost, move, cleanup
    "stopping": 4,
    "run": 5,  # the supervisor and its watchers
    "view": 6,  # the documents a reader sees
    "verbs": 7,  # each verb's handler
    "__main__": 8,  # the verb table
}
# Upward imports not yet taken out: (importer, imported). The second test fails once one is gone.
KNOWN: set = set()
# Files that still read the job spec as a plain dict; the last test below fails once one stops.
SPEC_DICT_READERS: set = set()
LONGEST = 420  # lines: a module longer than this holds more than one thing
TOO_LONG: set = set()


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
    assert "remote.stream" in edges["remote.data.transfer"]  # from remote.stream import ...
    assert "remote.jobs.lost" in edges["remote.__main__"]  # only inside functions


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


def room(module: str) -> str:
    """``remote.jobs.store`` -> ``jobs``; the package's own ``__init__`` (constants only) is core."""
    parts = module.split(".")
    return "core" if len(parts) == 1 else parts[1]


def upward() -> set:
    edges, _ = graph()
    bad = set()
    for mod, targets in edges.items():
        for t in targets:
            a, b = room(mod), room(t)
            if a != b and (RANK[b] > RANK[a] or RANK[b] == RANK[a]):
                bad.add((mod, t))
    return bad


def test_every_module_sits_in_a_room() -> None:
    """No flat modules beside the rooms: remote/ holds only its ``__init__``, ``__main__`` and folders."""
    flat = sorted(p.name for p in REMOTE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert not flat, f"flat modules in remote/ (move each into its room): {flat}"
    rooms = {p.name for p in REMOTE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == set(RANK) - {"__main__"}, f"rooms without a rank (add to RANK): {rooms ^ (set(RANK) - {'__main__'})}"


def test_remote_reads_top_to_bottom() -> None:
    """No import runs back up a room (or sideways between rooms of one rank), lazy ones included."""
    bad = upward() - KNOWN
    assert not bad, "imports back up in remote/ (move the shared piece down):\n" + "\n".join(
        f"  {a} ({room(a)}) imports {b} ({room(b)})" for a, b in sorted(bad))


def test_the_upward_allow_list_holds_only_what_is_still_there() -> None:
    gone = KNOWN - upward()
    assert not gone, f"fixed, so take them off KNOWN in {__file__}: {sorted(gone)}"


def test_the_rank_check_sees_an_upward_import() -> None:
    edges, _ = graph()
    assert "remote.core.layout" in edges["remote.jobs.store"]  # downward: allowed
    assert room("remote.jobs.store") == "jobs" and room("remote") == "core" and room("remote.__main__") == "__main__"


def test_no_module_holds_more_than_one_thing() -> None:
    long = {p.relative_to(REMOTE.parent).as_posix(): len(p.read_text().splitlines()) for p in REMOTE.rglob("*.py")}
    over = {p: n for p, n in long.items() if n > LONGEST}
    assert set(over) <= TOO_LONG, f"modules over {LONGEST} lines (split by what they hold): " + str(
        {p: n for p, n in over.items() if p not in TOO_LONG})
    shrunk = sorted(p for p in TOO_LONG if long.get(p, 0) <= LONGEST)
    assert not shrunk, f"now short, so take them off TOO_LONG in {__file__}: {shrunk}"


def spec_dict_readers() -> set:
    """Files outside core/spec.py reading spec.json's keys by hand (``spec.get("x")``, ``spec["x"]``)."""
    pat = re.compile(r"""\bspec(?:_data\(\))?\s*(?:\.get\(|\[["'])""")
    return {p.relative_to(REMOTE.parent).as_posix() for p in REMOTE.rglob("*.py")
            if p.name != "spec.py" and pat.search(p.read_text())}


def test_the_job_spec_is_read_through_JobSpec() -> None:
    """One door for spec.json (remote/core/spec.py): types and defaults are decided there, once."""
    extra = spec_dict_readers() - SPEC_DICT_READERS
    assert not extra, f"read the spec through remote.core.spec.JobSpec, not as a dict: {sorted(extra)}"
    gone = SPEC_DICT_READERS - spec_dict_readers()
    assert not gone, f"now read through JobSpec, so take them off SPEC_DICT_READERS in {__file__}: {sorted(gone)}"
