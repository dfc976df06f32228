"""The ignore rules decide every name as git does: a tricky tree is walked by ``walk`` and asked
of ``git check-ignore`` (the job's ``exclude:`` and ``ALWAYS`` play git's ``info/exclude``,
a ``.gpujobignore``'s lines are appended to its folder's ``.gitignore`` in git's copy)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpujob.config.ignore import ALWAYS, IgnoreRules, walk

EXCLUDE = ["*.ipynb", "!important.ipynb", "outputs/"]

ROOT_RULES = "\n".join([
    "# a comment, then a blank line", "",
    "*.log", "!keep.log",  # a negation
    "/anchored.txt", "**/deep/", "a/*.c", "doc/**/*.md", "logs/**", "out/**/", "mid/**/leaf", "sub/*.txt",
    "build/", "!build/inside.txt",  # a folder out, a file in it taken back: git does not take it back
    "\\#hash.txt", "\\!bang.txt", "#notacomment.txt",  # escapes; a comment
    "trail.txt   ", "space\\ ",  # trailing spaces dropped unless escaped
    "[abc]class.txt", "[!x]neg.txt",  # character classes
    "cache/", "!cache/", "only-dir/", "*.gpujob-part",
]) + "\n"

FILES = [
    "keep.log", "x.log", "anchored.txt", "sub/anchored.txt", "deep/f", "x/deep/y", "x/y/deep/z", "f/deep",
    "build/inside.txt", "build/other", "x/build/z", "#hash.txt", "#notacomment.txt", "!bang.txt", "bang.txt",
    "trail.txt", "trail.txt   ", "space ", "space", "aclass.txt", "dclass.txt", "xneg.txt", "yneg.txt", "neg.txt",
    "a/x.c", "a/b/y.c", "x/a/z.c", "doc/x.md", "doc/a/b/y.md", "doc/x.txt", "logs/z", "logs/a/b", "out/q",
    "out/d/e", "cache/f", "x/cache/g", "only-dir", "other/only-dir/z", "mid/leaf", "mid/a/b/leaf", "mid/leafy",
    "sub/a.log", "sub/note.txt", "sub/local.txt", "sub/deeper/b.log", "sub/deeper/c.txt", "sub/deeper/keep.log",
    "sub/deeper/local.txt", "sub/x.py", "sub/x.pyc", "__pycache__/m.pyc", "pkg/__pycache__/n.pyc", "z.pyc",
    "notebook.ipynb", "important.ipynb", "outputs/o.txt", "x/outputs/p", "big.bin.gpujob-part", ".DS_Store",
    "nested/.venv/bin/python", "plain/ok.py", "plain/[x].py", "star*/s.txt", "q?/t.txt",
]
DIRS = ["empty-dir", "deep2/deep"]
NESTED = {
    "sub/.gitignore": "!*.log\n/local.txt\n!note.txt\n",
    "sub/.gpujobignore": "*.py\n!x.py\n",
    "sub/deeper/.gitignore": "*.log\n!keep.log\n",
    "sub/deeper/.gpujobignore": "c.txt\n",
    "x/.gitignore": "!y\n",  # a file under an ignored folder stays out
    "plain/.gitignore": "\\[x].py\n",
}


def build(top: Path, merged: bool) -> None:
    """The tree; ``merged`` (git's copy): each ``.gpujobignore``'s lines also in its ``.gitignore``."""
    for rel in FILES:
        p = top / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(rel + "\n")
    for rel in DIRS:
        (top / rel).mkdir(parents=True, exist_ok=True)
    (top / ".gitignore").write_text(ROOT_RULES)
    for rel, text in NESTED.items():
        (top / rel).write_text(text)
    if merged:
        for rel, text in NESTED.items():
            if rel.endswith(".gpujobignore"):
                gi = top / rel.replace(".gpujobignore", ".gitignore")
                gi.write_text((gi.read_text() if gi.exists() else "") + text)


def every_path(top: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        rel = os.path.relpath(dirpath, top)
        for n in dirnames + filenames:
            out.append(n if rel == "." else f"{rel}/{n}")
    return sorted(out)


def git_ignored(top: Path, paths: list[str], home: Path) -> set[str]:
    """The paths git ignores (a name under an ignored folder included), from ``check-ignore -v -n``."""
    env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(home), GIT_CONFIG_NOSYSTEM="1",
               GIT_CONFIG_GLOBAL=os.devnull)
    subprocess.run(["git", "init", "-q", str(top)], check=True, env=env)
    (top / ".git" / "info").mkdir(exist_ok=True)
    (top / ".git" / "info" / "exclude").write_text("\n".join(ALWAYS + EXCLUDE) + "\n")
    r = subprocess.run(["git", "-C", str(top), "-c", "core.quotePath=off", "check-ignore", "--no-index", "-v", "-n",
                        "-z", "--stdin"], input="\0".join(paths) + "\0", capture_output=True, text=True, env=env)
    assert r.returncode in (0, 1), r.stderr
    fields = r.stdout.split("\0")  # source, line number, pattern, path, per path
    ignored = set()
    for i in range(0, len(fields) - 3, 4):
        source, pattern, path = fields[i], fields[i + 2], fields[i + 3]
        if source and not pattern.startswith("!"):
            ignored.add(path)
    assert len(fields) // 4 == len(paths), r.stdout[-500:]
    return ignored


def test_walk_decides_every_name_as_git_does(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the comparison with git check-ignore cannot run")
    ours, theirs = tmp_path / "ours", tmp_path / "git"
    build(ours, merged=False)
    build(theirs, merged=True)
    paths = every_path(ours)
    assert paths == every_path(theirs)

    kept = {rel for rel, _, _ in walk(ours, EXCLUDE)}
    ignored = set(paths) - kept
    want = git_ignored(theirs, paths, tmp_path)
    assert sorted(ignored - want) == [] and sorted(want - ignored) == [], "ignored here only / by git only"
    # the tree is tricky enough to mean something: each kind of decision occurs
    for rel in ("keep.log", "build/inside.txt", "sub/a.log", "sub/deeper/keep.log", "sub/x.py", "trail.txt",
                "important.ipynb", "cache/f", "only-dir", "x/y/deep/z", "#notacomment.txt"):
        assert (rel in ignored) == (rel in want)
    assert {"build/inside.txt", "x/deep/y", "sub/deeper/b.log", "a/x.c", "#hash.txt", "!bang.txt"} <= ignored
    assert {"keep.log", "sub/a.log", "a/b/y.c", "only-dir", "cache/f", "f/deep", "sub/x.py"} <= kept

    # one name at a time (what a plan from find's changed lines asks): the same answers
    rules = IgnoreRules(EXCLUDE)
    for folder in sorted({p.rpartition("/")[0] for p in kept} | {""}):
        rules.load_dir(ours, folder)
    for rel in sorted(kept):
        assert not rules.ignored(rel, (ours / rel).is_dir() and not (ours / rel).is_symlink()), rel
    for rel in sorted(ignored):
        parts = rel.split("/")
        parents_kept = all("/".join(parts[:i]) in kept for i in range(1, len(parts)))
        if parents_kept:
            assert rules.ignored(rel, (ours / rel).is_dir()), rel
