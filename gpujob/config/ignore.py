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
    name_body: str | None = None  # set when the rule tests the last name only (a top-level ``*.pyc``)


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
    name_only = not anchored and not base and "**" not in line
    return _Rule(re.compile(regex), negate, dir_only, body if name_only else None)


class IgnoreRules:
    """Ordered rules: the last matching one decides, as in git."""

    def __init__(self, patterns: list[str] | None = None) -> None:
        self.rules: list[_Rule] = []
        self._fast: tuple[re.Pattern | None, re.Pattern | None, list[_Rule]] | None = None
        for p in ALWAYS + list(patterns or []):
            self.add(p)

    def add(self, line: str, base: str = "") -> None:
        rule = compile_rule(line, base)
        if rule:
            self.rules.append(rule)
            self._fast = None

    def load_dir(self, top: Path, rel: str) -> None:
        for name in IGNORE_FILES:
            f = top / rel / name if rel else top / name
            if f.is_file():
                for line in f.read_text(errors="replace").splitlines():
                    self.add(line, rel)

    def _compile(self) -> tuple[re.Pattern | None, re.Pattern | None, list[_Rule]]:
        """Without negations the last match is any match: the rules that test the last name
        become one regex for files and one for folders (one match per path, not one per rule)."""
        def one(bodies: list[str]) -> re.Pattern | None:
            return re.compile("(?:" + "|".join(bodies) + ")$") if bodies else None  # matched from the name's start

        names = [r for r in self.rules if r.name_body is not None]
        files = one([r.name_body for r in names if not r.dir_only])  # type: ignore[misc]
        dirs = one([r.name_body for r in names])  # type: ignore[misc]
        return files, dirs, [r for r in self.rules if r.name_body is None]

    def ignored(self, rel: str, is_dir: bool) -> bool:
        if not any(r.negate for r in self.rules):
            if self._fast is None:
                self._fast = self._compile()
            files, dirs, others = self._fast
            rx = dirs if is_dir else files
            if rx is not None and rx.match(rel, rel.rfind("/") + 1):
                return True
            return any(r.regex.match(rel) for r in others if is_dir or not r.dir_only)
        result = False
        for r in self.rules:
            if r.dir_only and not is_dir:
                continue
            if r.regex.match(rel):
                result = not r.negate
        return result


def walk(top: Path, extra: list[str] | None = None, rules_apply: bool = True
         ) -> Iterator[tuple[str, os.stat_result, bool]]:
    """(relative path, lstat, is_dir) of every kept entry under ``top``, parents before children
    (``rules_apply=False``: every entry, no ignore rules at all). One ``scandir`` per folder;
    a folder's ignore files are looked for in its listing, not with a stat each."""
    rules = IgnoreRules(extra) if rules_apply else None
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(top / rel_dir if rel_dir else top) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        if rules is not None and any(e.name in IGNORE_FILES for e in entries):
            rules.load_dir(top, rel_dir)
        pre = rel_dir + "/" if rel_dir else ""
        for e in entries:
            rel = pre + e.name
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:  # gone since the listing
                continue
            is_dir = e.is_dir(follow_symlinks=False)
            if rules is not None and rules.ignored(rel, is_dir):
                continue
            yield rel, st, is_dir
            if is_dir:
                stack.append(rel)
