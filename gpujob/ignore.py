"""``.gitignore``-style rules (also ``.gpujobignore`` and the job's ``exclude:``)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ALWAYS = [".git/", "__pycache__/", "*.pyc", ".DS_Store", ".ipynb_checkpoints/", ".venv/", "*.gpujob-part"]
IGNORE_FILES = (".gitignore", ".gpujobignore")


@dataclass
class _Rule:
    regex: re.Pattern
    negate: bool
    dir_only: bool


def _translate(pat: str) -> str:
    """A gitignore glob (already stripped of !, leading and trailing /) as a regex body."""
    out, i = [], 0
    while i < len(pat):
        c = pat[i]
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("/**", i) and i + 3 == len(pat):
            out.append("/.*")
            i += 3
        elif pat.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pat.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
                i += 1
            else:
                body = pat[i + 1 : j].replace("\\", "\\\\")
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def compile_rule(line: str, base: str = "") -> _Rule | None:
    """One pattern line; ``base`` is the folder (relative, '' = top) of the file it came from."""
    line = line.rstrip("\n")
    if not line.strip() or line.startswith("#"):
        return None
    line = line.rstrip() if not line.endswith("\\ ") else line
    negate = line.startswith("!")
    if negate:
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.strip("/") if dir_only else line
    anchored = "/" in line.rstrip("/")
    line = line.lstrip("/")
    body = _translate(line)
    prefix = re.escape(base + "/") if base else ""
    regex = "^" + prefix + body + "$" if anchored else "^" + prefix + "(?:.*/)?" + body + "$"
    return _Rule(re.compile(regex), negate, dir_only)


class IgnoreRules:
    """Ordered rules: the last matching one decides, as in git."""

    def __init__(self, patterns: list[str] | None = None) -> None:
        self.rules: list[_Rule] = []
        for p in ALWAYS + list(patterns or []):
            self.add(p)

    def add(self, line: str, base: str = "") -> None:
        rule = compile_rule(line, base)
        if rule:
            self.rules.append(rule)

    def load_dir(self, top: Path, rel: str) -> None:
        for name in IGNORE_FILES:
            f = top / rel / name if rel else top / name
            if f.is_file():
                for line in f.read_text(errors="replace").splitlines():
                    self.add(line, rel)

    def ignored(self, rel: str, is_dir: bool) -> bool:
        result = False
        for r in self.rules:
            if r.dir_only and not is_dir:
                continue
            if r.regex.match(rel):
                result = not r.negate
        return result


def walk(top: Path, extra: list[str] | None = None) -> Iterator[tuple[str, os.stat_result, bool]]:
    """(relative path, lstat, is_dir) of every kept entry under ``top``, parents before children."""
    rules = IgnoreRules(extra)
    rules.load_dir(top, "")
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        base = top / rel_dir if rel_dir else top
        try:
            entries = sorted(os.scandir(base), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
            st = e.stat(follow_symlinks=False)
            is_dir = e.is_dir(follow_symlinks=False)
            if rules.ignored(rel, is_dir):
                continue
            yield rel, st, is_dir
            if is_dir:
                rules.load_dir(top, rel)
                stack.append(rel)
