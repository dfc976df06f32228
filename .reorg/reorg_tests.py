#!/usr/bin/env python3
"""Move tests/ into folders that mirror the packages (issue 39), from .reorg/mapping.tsv.

Run from the repository root, on a clean tree (everything committed):

    python3 .reorg/reorg_tests.py --check

It works from the mapping and by rewriting what it finds (AST for imports, patterns for paths),
never by applying a stored diff, so it runs on a tree edited since the mapping was written:

- every file named in the mapping is ``git mv``'d to its new path; files the mapping does not
  name go by the rules in ``default_home`` (and are listed);
- a destination named by several sources is a merge: the first source is ``git mv``'d, the others'
  test code is appended (imports merged, a name both define once), then they are ``git rm``'d;
- imports of moved modules (``from tests.helpers import ...``, ``from train_helpers import ...``,
  ``from tests import test_move``) name the new modules; ``Path(__file__).parents[N]`` and
  ``.parent.parent`` point where they pointed before; ``"tests" / "stand_ins"`` and every
  ``tests/...`` path (docs, README, BENCHMARKS, benchmarks/, .ci/run, comments) name the new path,
  a glob (``tests/test_byo_*.py``) the files it matched;
- tests/ and each folder holding tests get an ``__init__.py`` (tests import as ``tests.x.y.test_z``:
  two files may share a basename), tests/README.md says where tests live;
- ``ruff --select I --fix`` sorts the import lines it touched.

``--check`` collects the suite before and after (``pytest --collect-only``) and fails unless the
same test names (function and parameters) are collected, then runs ``ruff check .``.
``--dry-run`` prints the plan and changes nothing.
"""

from __future__ import annotations

import argparse
import ast
import collections
import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

HERE = Path(__file__).resolve().parent
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".yaml", ".yml", ".sh", ""}
# where references to tests/ paths are fixed besides tests/ itself (comments only, outside tests/)
REFERENCE_ROOTS = ["docs", "benchmarks", "gpujob", "remote", "templates", "examples", ".ci"]
REFERENCE_FILES = ["README.md", "BENCHMARKS.md", "pyproject.toml"]

README = """\
# Where the tests live

The tests mirror the code: a feature's tests sit in the folder named like its package.

| folder | holds |
|---|---|
| `tests/gpujob/` | the laptop side, one folder per layer: `cli/`, `api/`, `ui/`, `dashboard/`, `usecases/` (with `experiments/`, `lab/`, `power/`, `secrecy/`), `config/`, `transport/`; the layer check (`test_layers.py`) and the foundation modules at its top |
| `tests/remote/` | the agent, one folder per room: `core/`, `ckpt/`, `metrics/`, `env/`, `host/`, `data/`, `jobs/`, `stopping/`, `run/`, `view/`, `stream/`, `notify/`, `mirror/`; the agent's layer check and its Python 3.8 run at its top |
| `tests/templates/` | the training templates, the runtime helper and its autohook |
| `tests/benchmarks/` | the benchmark scripts that must not rot (the GPU check's CPU dry run) |
| `tests/e2e/` | a user's whole path through the real CLI (first run, users' example scripts, the docs' recipes) |
| `tests/faults/` | faults that cross packages, each in one file: a full disk, a cut or frozen link, concurrent clients, a client interrupted, damaged records, gc racing an upload, leftovers, the laptop's shared files |
| `tests/security/` | attacks that cross packages: a hostile agent (`test_hostile_*`), secrets anywhere, terminal injection (docs/security.md names each) |

At the top of `tests/`, what every folder shares: `conftest.py` (the fixtures: the real sshd, isolated
folders, `REPO`), the helper modules (`helpers`, `hostile`, `netlab`, `loopfs`, `screen`, `lab_servers`,
`mirror_lab`, `byo_helpers`, `train_helpers`) and `stand_ins/` (the `nvidia-smi` and power-switch
stand-ins). The fault tools sit with the faults (`tests/faults/linkproxy.py`, `tests/faults/sigint_at.py`).
A test's own data sits beside it (`tests/remote/metrics/data/`, `tests/remote/run/ddp_job/`).

## A new test's home

1. It proves one module's behaviour: the folder mirroring that module's package
   (`remote/ckpt/keepcopy.py` → `tests/remote/ckpt/`, `gpujob/usecases/sync.py` → `tests/gpujob/usecases/`),
   even when it drives the real CLI to get there.
2. It injects a fault (disk, link, kill, race, damaged file) that no single package owns: the file in
   `tests/faults/` for that fault; a new kind of fault gets a new file there.
3. It plays an attacker: `tests/security/`.
4. It walks a user's whole path across many commands: `tests/e2e/`.

Import helpers as `from tests.helpers import ...` and fixtures from `tests.conftest`; every folder
holding tests has an `__init__.py` (tests import as `tests.remote.ckpt.test_checkpoints`), so two files may
share a basename. Find the repository from a test with `from tests.conftest import REPO`. A test module
that moved still imports by its old name (`tests/__init__.py`: `MOVED`), for suites written before the move.
"""


def git(*args: str, check: bool = True) -> str:
    r = subprocess.run(["git", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"git {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def move(src: str, dst: str) -> None:
    """``git mv`` (history follows); a file git does not track yet is renamed and added."""
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["git", "ls-files", "--error-unmatch", src], capture_output=True).returncode == 0:
        git("mv", src, dst)
    else:
        os.rename(src, dst)
        git("add", dst)


def mod_of(path: str) -> str:
    p = PurePosixPath(path)
    parts = list(p.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


# ---------------------------------------------------------------- the plan

def read_mapping(path: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    moves, texts = [], []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split("\t")
        if cols[0] == "text" and len(cols) == 3:  # \n in OLD or NEW: a line break
            texts.append((cols[1].replace("\\n", "\n"), cols[2].replace("\\n", "\n")))
        elif len(cols) == 2:
            moves.append((cols[0].strip(), cols[1].strip()))
        else:
            sys.exit(f"{path}:{n}: expected 'OLD<TAB>NEW' or 'text<TAB>OLD<TAB>NEW'")
    return moves, texts


def tree_files() -> list[str]:
    out = git("ls-files", "tests").split("\n") + git("ls-files", "--others", "--exclude-standard", "tests").split("\n")
    return sorted({f for f in out if f and "__pycache__" not in f and Path(f).is_file()})


PREFIX_HOMES = [  # (basename prefix, folder): a new test's home by its name, before its imports are read
    ("test_hostile_", "tests/security"), ("test_faults_", "tests/faults"), ("test_dashboard", "tests/gpujob/dashboard"),
    ("test_templates_", "tests/templates"), ("test_runtime", "tests/templates"), ("test_notify", "tests/remote/notify"),
    ("test_mirror", "tests/remote/mirror"), ("test_sync", "tests/gpujob/usecases"), ("test_pull", "tests/gpujob/usecases"),
    ("test_lab_", "tests/gpujob/usecases/lab"), ("test_power", "tests/gpujob/usecases/power"),
]


def default_home(path: str, repo: Path) -> str | None:
    """Where a file the mapping does not name goes (None: it stays, and is reported)."""
    p = PurePosixPath(path)
    old_flat = len(p.parts) == 2 or (len(p.parts) == 3 and p.parts[1] == "faults")
    if not old_flat or p.suffix != ".py" or p.name in ("conftest.py", "__init__.py"):
        return None
    if not p.name.startswith("test_") or p.parts[1] == "faults":
        return None  # a helper stays at the top; a fault's test stays with the faults
    for prefix, folder in PREFIX_HOMES:
        if p.name.startswith(prefix):
            name = p.name
            if prefix == "test_faults_":
                name = "test_" + p.name[len(prefix):]
            return f"{folder}/{name}"
    # the package it imports most: gpujob.X / remote.X (a folder there), else the package's top
    counts: collections.Counter[str] = collections.Counter()
    try:
        tree = ast.parse((repo / path).read_text())
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        for m in names:
            parts = m.split(".")
            if parts[0] in ("gpujob", "remote"):
                sub = parts[:2] if len(parts) > 1 and (repo / parts[0] / parts[1]).is_dir() else parts[:1]
                counts["/".join(sub)] += 1
    if counts:
        return f"tests/{counts.most_common(1)[0][0]}/{p.name}"
    return f"tests/e2e/{p.name}"  # only the real CLI: a user's path


class Plan:
    def __init__(self, repo: Path, mapping: Path) -> None:
        self.repo = repo
        moves, self.texts = read_mapping(mapping)
        files = tree_files()
        present = set(files)
        self.dest: dict[str, str] = {}  # every source -> destination, present or not (for rewriting references)
        self.groups: dict[str, list[str]] = {}  # destination -> present sources, in mapping order
        self.unmapped: list[tuple[str, str | None]] = []
        self.gone: list[str] = []
        dests = {d for _, d in moves}
        for src, dst in moves:
            self.dest[src] = dst
            if src in present:
                self.groups.setdefault(dst, []).append(src)
            elif dst not in present:
                self.gone.append(src)
        mapped = set(self.dest) | dests
        for f in files:
            if f in mapped or f in ("tests/README.md",) or f.endswith("/__init__.py"):
                continue
            home = default_home(f, repo)
            if home and (home in present or home in self.groups):
                home = None  # never onto a file already there: it stays, reported
            self.unmapped.append((f, home))
            if home:
                self.dest[f] = home
                self.groups.setdefault(home, []).append(f)
        self.modmap = {mod_of(s): mod_of(d) for s, d in self.dest.items() if s.endswith(".py") and mod_of(s) != mod_of(d)}
        # files that sat where pytest put tests/ on sys.path could import each other by bare name
        self.pathmap = dict(self.dest)
        self.pathmap.update(self._dir_moves(files))
        self.old_files = sorted(set(self.dest) | set(files))
        self.old_mods = {mod_of(f) for f in self.old_files if f.endswith(".py")}
        # a file merged into another: a reference to it as a whole names its test when it had one
        self.sole_test: dict[str, str] = {}
        for srcs in self.groups.values():
            for s in srcs[1:]:
                try:
                    tree = ast.parse((repo / s).read_text())
                except (SyntaxError, UnicodeDecodeError):
                    continue
                tests = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                         and n.name.startswith("test_")]
                if len(tests) == 1:
                    self.sole_test[s] = tests[0]
        # top-level names under tests/: a test could import them bare while pytest put tests/ on sys.path
        self.bare = {PurePosixPath(f).parts[1].removesuffix(".py") for f in self.old_files if f.count("/") >= 1}

    def _dir_moves(self, files: list[str]) -> dict[str, str]:
        """Old folders whose every file moved by one prefix (tests/stand_ins -> tests/support/stand_ins)."""
        out = {}
        dirs = {str(p) for s in self.dest for p in PurePosixPath(s).parents if str(p).startswith("tests/")}
        for d in sorted(dirs):
            inside = [s for s in self.dest if s.startswith(d + "/")]
            new = {self.dest[s][: len(self.dest[s]) - len(s) + len(d)] for s in inside
                   if self.dest[s].endswith(s[len(d):])}
            if len(new) == 1 and all(self.dest[s].endswith(s[len(d):]) for s in inside):
                nd = new.pop()
                if nd != d:
                    out[d] = nd
        return out


# ---------------------------------------------------------------- rewriting text

def map_path(p: str, pathmap: dict[str, str]) -> str:
    if p in pathmap:
        return pathmap[p]
    best = max((d for d in pathmap if p.startswith(d + "/")), key=len, default=None)
    return pathmap[best] + p[len(best):] if best else p


PATH_RE = re.compile(r"(?<![\w./-])tests/[\w./*-]*")


def rewrite_paths(text: str, plan: Plan) -> str:
    def one(m: re.Match[str]) -> str:
        s = m.group(0)
        core = s.rstrip(".,/")
        tail = s[len(core):]
        if "*" in core:
            return expand_glob(core, plan, m.string, m.start(), m.end()) + tail
        test = plan.sole_test.get(core)
        if test and not tail and m.string[m.end():m.end() + 2] != "::":
            return f"{map_path(core, plan.pathmap)}::{test}"
        return map_path(core, plan.pathmap) + tail

    return PATH_RE.sub(one, text)


def expand_glob(pattern: str, plan: Plan, text: str, start: int, end: int) -> str:
    """``tests/test_byo_*.py`` -> the new paths of what it matched, a glob again per new folder."""
    matched = [f for f in plan.old_files if fnmatch.fnmatchcase(f, pattern) and f in plan.dest]
    if not matched:
        return pattern
    by_dir: dict[str, list[str]] = collections.defaultdict(list)
    for f in matched:
        by_dir[str(PurePosixPath(plan.dest[f]).parent)].append(plan.dest[f])
    name_glob = PurePosixPath(pattern).name
    news = [n for f, n in plan.dest.items() if f not in matched]
    out = []
    for d, paths in by_dir.items():
        paths = sorted(set(paths))
        own = [n for n in news if str(PurePosixPath(n).parent) == d and fnmatch.fnmatchcase(PurePosixPath(n).name, name_glob)]
        if len(paths) > 1 and not own and all(fnmatch.fnmatchcase(PurePosixPath(p).name, name_glob) for p in paths):
            out.append(f"{d}/{name_glob}")
        else:
            out.extend(paths)
    quoted = start > 0 and text[start - 1] == "`" and text[end:end + 1] == "`"
    return ("`, `" if quoted else ", ").join(out)


SEG_RE = re.compile(r"""(["'])tests\1((?:\s*/\s*(["'])[\w.\-]+\3)+)""")
SEG_ONE = re.compile(r"""(["'])([\w.\-]+)\1""")


def rewrite_segments(text: str, plan: Plan) -> str:
    """``REPO / "tests" / "stand_ins"`` -> ``REPO / "tests" / "support" / "stand_ins"``."""
    def one(m: re.Match[str]) -> str:
        q = m.group(1)
        segs = [s.group(2) for s in SEG_ONE.finditer(m.group(2))]
        new = map_path("/".join(["tests", *segs]), plan.pathmap)
        if new == "/".join(["tests", *segs]):
            return m.group(0)
        return " / ".join(f"{q}{s}{q}" for s in new.split("/"))

    return SEG_RE.sub(one, text)


DOTTED_RE = re.compile(r"(?<![\w.])tests(?:\.\w+)+")


def rewrite_dotted(text: str, plan: Plan) -> str:
    def one(m: re.Match[str]) -> str:
        parts = m.group(0).split(".")
        for n in range(len(parts), 1, -1):
            new = plan.modmap.get(".".join(parts[:n]))
            if new:
                return ".".join([new, *parts[n:]])
        return m.group(0)

    return DOTTED_RE.sub(one, text)


FILE_RE = re.compile(r"""Path\(__file__\)(\.resolve\(\))?(\.parents\[(\d+)\]|(?:\.parent)+(?!s))((?:\s*/\s*(["'])[\w.\-]+\5)*)""")


def rewrite_file_relative(text: str, old: str, new: str, plan: Plan, warn: list[str]) -> str:
    """``Path(__file__).resolve().parents[1] / "remote"`` keeps pointing at the same place from ``new``."""
    if old == new:
        return text

    def one(m: re.Match[str]) -> str:
        level = int(m.group(3)) if m.group(3) is not None else m.group(2).count(".parent") - 1
        segs = [s.group(2) for s in SEG_ONE.finditer(m.group(4) or "")]
        q = m.group(5) or '"'
        ups = PurePosixPath(old).parents
        if level >= len(ups):
            warn.append(f"{new}: {m.group(0)} points above the repository; left as it was")
            return m.group(0)
        target = ups[level].joinpath(*segs)
        if not segs and str(target).startswith("tests"):
            warn.append(f"{new}: {m.group(0)} is {target}/, and what is joined to it later may have moved; check it")
        target_new = PurePosixPath(map_path(str(target), plan.pathmap)) if str(target) != "." else target
        here = PurePosixPath(new).parent
        common = here
        while str(common) != "." and not (target_new == common or common in target_new.parents):
            common = common.parent
        up = len(here.parts) - len(common.parts)
        rest = target_new.relative_to(common) if str(common) != "." else target_new
        expr = "Path(__file__)" + (m.group(1) or "") + (".parent" if up == 0 else f".parents[{up}]")
        for s in ([] if str(rest) == "." else rest.parts):
            expr += f" / {q}{s}{q}"
        return expr

    out = FILE_RE.sub(one, text)
    for n, line in enumerate(out.splitlines(), 1):
        if re.search(r"(?<![.\w{])__file__", line) and not FILE_RE.search(line):
            warn.append(f"{new}:{n}: __file__ used in a way this script does not rewrite; check it: {line.strip()}")
    return out


# ---------------------------------------------------------------- imports

def byte_offsets(src: bytes) -> list[int]:
    starts = [0]
    for i, b in enumerate(src):
        if b == 10:
            starts.append(i + 1)
    return starts


def rewrite_imports(text: str, self_mod: str, plan: Plan, in_tests: bool, warn: list[str], where: str) -> str:
    """Imports of moved modules name the new ones; names a merged file now defines itself are dropped."""
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        warn.append(f"{where}: not parsed ({e}); imports left as they were")
        return text
    src = text.encode()
    starts = byte_offsets(src)
    edits: list[tuple[int, int, bytes]] = []

    def resolve(module: str) -> str | None:
        if module in plan.modmap:
            return plan.modmap[module]
        if is_bare(module):  # it worked because pytest put tests/ on sys.path: tests/ is a package now
            return plan.modmap.get("tests." + module, "tests." + module)
        return None

    def is_bare(module: str) -> bool:
        head = module.split(".")[0]
        return in_tests and head != "tests" and head in plan.bare and not (plan.repo / head).exists()

    def as_module(full: str) -> str | None:
        """``from P import N`` where P.N is a module of tests/: its new dotted name."""
        for name in (full, "tests." + full if is_bare(full) else None):
            if name and (name in plan.modmap or name in plan.old_mods):
                return plan.modmap.get(name, name)
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if in_tests:
                    warn.append(f"{where}:{node.lineno}: a relative import; check it after the move")
                continue
            module = node.module or ""
            groups: dict[str, list[str]] = {}
            changed = False
            for a in node.names:
                sub = as_module(f"{module}.{a.name}") if module else None
                if sub is not None:  # `from tests import test_move`: a module
                    parent, _, base = sub.rpartition(".")
                    alias = a.asname or a.name
                    groups.setdefault(parent, []).append(base if base == alias else f"{base} as {alias}")
                    changed = changed or sub != f"{module}.{a.name}"
                    continue
                new = resolve(module) or module
                if new != module:
                    changed = True
                if new == self_mod and in_tests:  # a merged file: the name is defined here now
                    changed = True
                    if a.asname and a.asname != a.name:
                        warn.append(f"{where}:{node.lineno}: '{a.name} as {a.asname}' from itself after the merge; "
                                    "left as an import from the merged module")
                        groups.setdefault(new, []).append(f"{a.name} as {a.asname}")
                    continue
                groups.setdefault(new, []).append(a.name if not a.asname else f"{a.name} as {a.asname}")
            if not changed:
                continue
            indent = " " * node.col_offset
            stmts = [f"from {m} import {', '.join(names)}" for m, names in groups.items()]
            start = starts[node.lineno - 1] + node.col_offset
            end = starts[node.end_lineno - 1] + node.end_col_offset
            if not stmts:  # every name is now defined here: the statement (and its line) goes
                line_start = starts[node.lineno - 1]
                line_end = starts[node.end_lineno] if node.end_lineno < len(starts) else len(src)
                if src[line_start:start].strip() == b"" and node.col_offset == 0:
                    edits.append((line_start, line_end, b""))
                else:
                    edits.append((start, end, b"pass"))
                continue
            edits.append((start, end, ("\n" + indent).join(stmts).encode()))
        elif isinstance(node, ast.Import):
            names = []
            changed = False
            for a in node.names:
                new = resolve(a.name)
                if new and new != a.name:
                    changed = True
                    names.append(f"{new} as {a.asname}" if a.asname else new)
                else:
                    names.append(f"{a.name} as {a.asname}" if a.asname else a.name)
            if changed:
                start = starts[node.lineno - 1] + node.col_offset
                end = starts[node.end_lineno - 1] + node.end_col_offset
                edits.append((start, end, f"import {', '.join(names)}".encode()))
    for start, end, new in sorted(edits, reverse=True):
        src = src[:start] + new + src[end:]
    return src.decode()


# ---------------------------------------------------------------- merging

def top_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def module_effects(tree: ast.Module) -> list[str]:
    """Statements that act on the whole module (a mark, a skip): a merge would spread them."""
    out = []
    for node in tree.body:
        if "pytestmark" in top_names(node):
            out.append(ast.unparse(node))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            f = ast.unparse(node.value.func)
            if f.startswith("pytest.") or f.startswith("sys.path"):
                out.append(ast.unparse(node))
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                ast.unparse(node.value.func).startswith("pytest.importorskip"):
            out.append(ast.unparse(node))
    return out


def split(text: str) -> tuple[str | None, list[str], str, ast.Module]:
    """A module as (docstring source, import statements' sources, the rest)."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    body = tree.body
    doc = None
    i = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        doc = "".join(lines[body[0].lineno - 1: body[0].end_lineno])
        i = 1
    j = i
    while j < len(body) and isinstance(body[j], (ast.Import, ast.ImportFrom)):
        j += 1
    imports = ["".join(lines[n.lineno - 1: n.end_lineno]).rstrip("\n") for n in body[i:j]]
    after = body[j - 1].end_lineno if j > 0 else 0
    rest = "".join(lines[after:])
    return doc, imports, rest, tree


def doc_inner(doc: str) -> tuple[str, str]:
    d = doc.strip()
    prefix = ""
    while d[0] in "rRuU":
        prefix, d = prefix + d[0], d[1:]
    q = d[:3]
    return prefix, d[3:-3] if q in ('"""', "'''") else d[1:-1]


def imported_names(tree: ast.Module, skip: set[str]) -> dict[str, str]:
    """Names a module's top-level imports bind -> where from (imports from ``skip`` left out)."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module not in skip and not node.level:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name
    return out


def merge(parts: list[tuple[str, str]], warn: list[str]) -> str | None:
    """Texts of several test modules as one (None: they cannot be merged safely, and why is in warn)."""
    splits = [(path, *split(text)) for path, text in parts]
    effects = {tuple(module_effects(s[4])) for s in splits}
    if len(effects) > 1:
        warn.append(f"not merged {[p for p, _ in parts]}: module-wide statements differ ({effects})")
        return None
    mods = {mod_of(p) for p, _ in parts}
    defined = [{n for node in s[4].body for n in top_names(node)} for s in splits]
    bound: dict[str, str] = {}
    for i, s in enumerate(splits):
        for name, origin in imported_names(s[4], mods).items():
            clash = [splits[j][0] for j in range(len(splits)) if j != i and name in defined[j]]
            if clash or bound.setdefault(name, origin) != origin:
                warn.append(f"not merged {[p for p, _ in parts]}: {name} means different things in {s[0]} and "
                            f"{clash or bound[name]}")
                return None
    seen: dict[str, tuple[str, str]] = {}
    rests = []
    for path, _doc, _imports, rest, _tree in splits:
        drop_lines: list[tuple[int, int]] = []
        rest_tree = ast.parse(rest)
        rest_lines = rest.splitlines(keepends=True)
        for node in rest_tree.body:
            for name in top_names(node):
                seg = "".join(rest_lines[node.lineno - 1: node.end_lineno])
                first = getattr(node, "decorator_list", None)
                if name in seen:
                    if seen[name][1] == seg:
                        start = min([d.lineno for d in first] + [node.lineno]) if first else node.lineno
                        drop_lines.append((start, node.end_lineno))
                    else:
                        warn.append(f"not merged {[p for p, _ in parts]}: {name} differs in {seen[name][0]} and {path}")
                        return None
                else:
                    seen[name] = (path, seg)
        for a, b in sorted(drop_lines, reverse=True):
            del rest_lines[a - 1: b]
        rests.append("".join(rest_lines).strip("\n"))
    prefix, inner = doc_inner(splits[0][1] or '""""""')
    inners = [inner.rstrip()] + [doc_inner(s[1])[1].strip() for s in splits[1:] if s[1]]
    doc = f'{prefix}"""' + "\n\n".join(i for i in inners if i) + '"""'
    imports: list[str] = []
    for s in splits:
        for imp in s[2]:
            if imp not in imports:
                imports.append(imp)
    future = [i for i in imports if i.startswith("from __future__")]
    others = [i for i in imports if not i.startswith("from __future__")]
    head = doc + "\n\n" + ("\n".join(future) + "\n\n" if future else "") + "\n".join(others)
    return head + "\n\n\n" + "\n\n\n".join(r for r in rests if r) + "\n"


# ---------------------------------------------------------------- applying

def reference_files(repo: Path) -> list[Path]:
    out = [repo / f for f in REFERENCE_FILES if (repo / f).is_file()]
    tracked = git("ls-files", *REFERENCE_ROOTS).split("\n")
    for f in tracked:
        p = repo / f
        if f and p.is_file() and (p.suffix in TEXT_SUFFIXES) and p.stat().st_size < 2_000_000:
            out.append(p)
    return out


def ensure_packages(repo: Path) -> list[str]:
    """An __init__.py in tests/ and in every folder holding tests (and the ones above it)."""
    made = []
    need = {repo / "tests"}
    for p in (repo / "tests").rglob("*.py"):
        if "__pycache__" in p.parts:
            continue
        if p.name.startswith("test_") or p.name == "conftest.py":
            d = p.parent
            while d != repo:
                need.add(d)
                d = d.parent
    for d in sorted(need):
        if d == repo / "tests":
            continue  # written by old_names()
        if not (d / "__init__.py").exists() and d.is_dir():
            (d / "__init__.py").write_text("")
            made.append(str((d / "__init__.py").relative_to(repo)))
    return made


INIT = '''"""The test suite: tests/README.md says where a test lives.

A test module moved by issue 39's reorganisation still imports by its old name (a suite written before
it: ``from tests.test_events import Hook``): a module of the same objects as the one under the new name."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

MOVED = {
%s}


class _OldName(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``tests.test_x`` -> the names of ``tests.<package>.test_x``, asked for after every other finder."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(name, self) if name in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        new = importlib.import_module(MOVED[module.__name__])
        module.__dict__.update({k: v for k, v in vars(new).items() if not k.startswith("__")})


sys.meta_path.append(_OldName())
'''


def old_names(plan: Plan) -> None:
    """tests/__init__.py with every moved test module's old name (kept from an earlier run too)."""
    init = plan.repo / "tests" / "__init__.py"
    moved = {o: n for o, n in plan.modmap.items() if o.rpartition(".")[2].startswith("test_")}
    if init.exists():
        for node in ast.parse(init.read_text()).body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["MOVED"]:
                moved = {**ast.literal_eval(node.value), **moved}
    moved = {o: n for o, n in moved.items() if o != n}
    init.write_text(INIT % "".join(f"    {o!r}: {n!r},\n" for o, n in sorted(moved.items())).replace("'", '"'))


def apply(plan: Plan, dry: bool) -> tuple[list[str], list[str]]:
    repo = plan.repo
    warn: list[str] = []
    log: list[str] = []
    originals = {s: (repo / s).read_bytes() for srcs in plan.groups.values() for s in srcs}
    merged_away: list[str] = []
    written: dict[str, str] = {}  # destination -> text (python files, before the global rewrite)
    for dst, srcs in plan.groups.items():
        if srcs == [dst]:
            continue
        texts = []
        for s in srcs:
            if s.endswith(".py"):
                texts.append((s, rewrite_file_relative(originals[s].decode(), s, dst, plan, warn)))
        if len(srcs) > 1:
            text = merge(texts, warn)
            if text is None:  # each part keeps a file of its own beside the destination
                for s in srcs[1:]:
                    alt = str(PurePosixPath(dst).with_name(PurePosixPath(s).name))
                    plan.dest[s] = alt
                    plan.pathmap[s] = alt
                    plan.modmap[mod_of(s)] = mod_of(alt)
                    log.append(f"separate  {s} -> {alt} (merge refused)")
                    if not dry:
                        move(s, alt)
                        written[alt] = rewrite_file_relative(originals[s].decode(), s, alt, plan, warn)
                srcs = srcs[:1]
                text = texts[0][1]
            else:
                log.append(f"merge     {' + '.join(srcs)} -> {dst}")
                merged_away += srcs[1:]
        else:
            text = texts[0][1] if texts else None
            log.append(f"move      {srcs[0]} -> {dst}")
        if dry:
            continue
        if srcs[0] != dst:
            move(srcs[0], dst)
        for s in srcs[1:]:  # merged into dst
            if subprocess.run(["git", "ls-files", "--error-unmatch", s], capture_output=True).returncode == 0:
                git("rm", "-q", "-f", s)
            else:
                os.remove(s)
        if text is not None:
            written[dst] = text
    if dry:
        return log, warn
    for dst, text in written.items():
        (repo / dst).write_text(text)
    # every python file under tests/ and every reference elsewhere, rewritten where it names a moved thing
    changed_py = []
    texts_found: set[str] = set()
    targets = [p for p in (repo / "tests").rglob("*") if p.is_file() and "__pycache__" not in p.parts
               and p != repo / "tests" / "__init__.py"  # its old names are written by old_names()
               and p.suffix in TEXT_SUFFIXES and not any(part in ("logs", "logcorpus") for part in p.parts)]
    for p in targets + reference_files(repo):
        rel = str(p.relative_to(repo))
        try:
            text = p.read_text()
        except UnicodeDecodeError:
            continue
        new = text
        if p.suffix == ".py" and (rel.startswith("tests/") or re.search(r"\btests\b", text)):
            new = rewrite_imports(new, mod_of(rel), plan, rel.startswith("tests/"), warn, rel)
            new = rewrite_segments(new, plan)
        new = rewrite_dotted(new, plan)
        new = rewrite_paths(new, plan)
        for old, repl in plan.texts:
            if old in new:
                texts_found.add(old)
                if repl not in new:
                    new = new.replace(old, repl)
        if new != text:
            p.write_text(new)
            if p.suffix == ".py":
                changed_py.append(rel)
    warn += [f"text not found anywhere (add it by hand): {old!r}" for old, _ in plan.texts if old not in texts_found]
    changed_py = sorted(set(changed_py) | {d for d in written if d.endswith(".py")})  # merged: imports to sort
    for d in sorted((repo / "tests").rglob("*"), key=lambda p: -len(p.parts)):  # folders a move emptied
        if d.is_dir() and d.name != "__pycache__" and all(c.name == "__pycache__" for c in d.iterdir()):
            for c in d.iterdir():
                subprocess.run(["rm", "-rf", str(c)], check=True)
            d.rmdir()
    made = ensure_packages(repo)
    old_names(plan)
    (repo / "tests" / "README.md").write_text(README)
    git("add", "-A", "tests", *[str(p.relative_to(repo)) for p in reference_files(repo)])
    if changed_py:
        r = subprocess.run([sys.executable, "-m", "ruff", "check", "-q", "--select", "I", "--fix", *changed_py],
                           capture_output=True, text=True)
        if r.returncode not in (0, 1):
            warn.append(f"ruff could not sort the imports: {r.stderr.strip() or r.stdout.strip()}")
        git("add", "-A", "tests", *[str(p.relative_to(repo)) for p in reference_files(repo)])
    log += [f"package   {m}" for m in made]
    log.append(f"rewrote   {len(changed_py)} python files' imports/paths")
    return log, warn


def collect(repo: Path) -> tuple[int, collections.Counter[str], str]:
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                       cwd=repo, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(repo)))
    ids = [line for line in r.stdout.splitlines() if "::" in line]
    return r.returncode, collections.Counter(i.split("::", 1)[1] for i in ids), r.stdout[-3000:] + r.stderr[-3000:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mapping", type=Path, default=HERE / "mapping.tsv")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    ap.add_argument("--check", action="store_true", help="collect the suite before and after; ruff after")
    args = ap.parse_args()
    repo = Path(git("rev-parse", "--show-toplevel").strip())
    os.chdir(repo)
    if not args.dry_run and git("status", "--porcelain", "--untracked-files=no", "tests").strip():
        sys.exit("tests/ has uncommitted changes: commit them first (the moves are git mv)")
    before = collect(repo) if args.check else None
    if before and before[0] != 0:
        sys.exit(f"the suite does not collect before the move:\n{before[2]}")
    plan = Plan(repo, args.mapping)
    log, warn = apply(plan, args.dry_run)
    print("\n".join(log))
    if plan.unmapped:
        print("\nnot in the mapping (placed by rule; None: left where it is):")
        for f, home in plan.unmapped:
            print(f"  {f} -> {home}")
    if plan.gone:
        print("\nin the mapping but not in the tree (removed since?):\n  " + "\n  ".join(plan.gone))
    if warn:
        print("\ncheck by hand:\n  " + "\n  ".join(warn))
    if args.check and not args.dry_run:
        after = collect(repo)
        b, a = before[1], after[1]  # type: ignore[index]
        print(f"\ncollected: {sum(b.values())} before, {sum(a.values())} after")
        if after[0] != 0 or a != b:
            print(after[2])
            print("missing:", sorted((b - a).elements())[:50], "\nnew:", sorted((a - b).elements())[:50])
            return 1
        r = subprocess.run([sys.executable, "-m", "ruff", "check", "."], capture_output=True, text=True)
        print("ruff:", (r.stdout.strip().splitlines() or ["clean"])[-1])
        if r.returncode != 0:
            print(r.stdout[-5000:])
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
