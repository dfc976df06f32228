"""``.gitignore``-style rules (also ``.gpujobignore`` and the job's ``exclude:``), as git applies them.

``pathspec`` translates each pattern (escapes, character classes, ``**``, trailing spaces) into a
regex; the matching is ours, because a walk decides one name at a time as git does: a folder
that is ignored is not entered (nothing under it can be taken back by a later ``!``), and every
other name is decided by the last rule that matches that very name. The rules of one ignore
file are relative to its folder and win over those of the folders above it; the job's
``exclude:`` (with ``ALWAYS``) ranks with the top folder's files, before them, as git's
``info/exclude`` does. Each folder's rules become at most two regexes (one for the rules that
test the last name only, one for those that test the path), their alternatives in reverse order
so that the first to match is the last rule: one or two matches per name and folder of rules,
whatever the number of patterns.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pathspec import GitIgnoreSpec

# gpujob-pulls/: pull's default folder, in the project when pull runs there (never sent back up as code)
ALWAYS = [".git/", "__pycache__/", "*.pyc", ".DS_Store", ".ipynb_checkpoints/", ".venv/", "*.gpujob-part", "gpujob-pulls/"]
IGNORE_FILES = (".gitignore", ".gpujobignore")

_DIR_MARK = "(?P<ps_d>/)"  # pathspec's marker of "this folder and what is under it"
_ANY_DEPTH = "^(?:.+/)?"  # a pattern without a slash: any folder below its file's


@dataclass
class _Rule:
    body: str  # regex matching the whole path relative to the rules' folder ('/' ends a folder's path)
    negate: bool
    name_only: bool  # ``body`` tests the last name only


def compile_rule(line: str) -> _Rule | None:
    """One pattern line as a rule (None for a blank line, a comment, or a pattern git discards)."""
    line = line.rstrip("\n")
    if not line:
        return None
    try:
        pattern = GitIgnoreSpec.from_lines([line]).patterns[0]
    except (ValueError, re.error):  # an invalid range or the like: git skips the pattern too
        return None
    if pattern.include is None or pattern.regex is None:
        return None
    body = _exact(pattern.regex.pattern)
    if line.rstrip().endswith("/**/") and body.endswith("/"):  # folders under it, not itself (pathspec's
        body += ".+/"                                          # regex takes the folder too; git does not)
    rest = body[len(_ANY_DEPTH):].replace("[^/]", "")  # a slash other than a folder's end: a path rule
    name_only = body.startswith(_ANY_DEPTH) and "/" not in (rest[:-2] if rest.endswith("/?") else rest[:-1])
    if name_only:
        body = body[len(_ANY_DEPTH):]
    elif body.startswith("^"):
        body = body[1:]
    return _Rule(body, not pattern.include, name_only)


def _exact(rx: str) -> str:
    """pathspec's regex (searched; it also matches everything under a folder it matches) as one
    that matches only the path itself, given with a trailing '/' when it is a folder."""
    if rx == ".":  # ``*``, ``**``: every name
        return ".+"
    if rx == _DIR_MARK:  # ``*/``, ``**/``: every folder
        return ".+/"
    if rx == "/":  # ``**/*/**``: every name below the top
        return ".+/.+"
    if rx.endswith("(?:" + _DIR_MARK + "|$)"):  # a name that may be a file or a folder
        return rx[: -len(_DIR_MARK) - 6] + "/?"
    if rx.endswith(_DIR_MARK):  # a trailing '/': folders only
        return rx[: -len(_DIR_MARK)] + "/"
    if rx.endswith("/"):  # ``dir/**``: what is under it, not the folder itself
        return rx + ".+"
    raise RuntimeError(f"pathspec produced a regex this module does not know: {rx!r} (pathspec>=1.1,<2 is needed)")


@dataclass
class _Frame:
    """The rules of one folder (``base``), in file order, and their compiled matchers."""

    base: str
    rules: list[_Rule] = field(default_factory=list)
    _names: tuple[re.Pattern, re.Pattern, list[int]] | None = None
    _paths: tuple[re.Pattern, re.Pattern, list[int]] | None = None
    _ready: bool = False

    def add(self, rule: _Rule) -> None:
        self.rules.append(rule)
        self._ready = False

    def _compile(self) -> None:
        def one(which: list[int]) -> tuple[re.Pattern, re.Pattern, list[int]] | None:
            if not which:
                return None
            order = which[::-1]  # the last rule first: the first alternative to match is the last rule
            bodies = [self.rules[i].body for i in order]
            # most names match no rule: a test without groups (several times faster) comes first
            test = re.compile("(?:" + "|".join(bodies) + ")\\Z")
            rx = re.compile("|".join(f"({b})\\Z" for b in bodies))
            owner = [-1] * (rx.groups + 1)  # the rule of each alternative's group, past the groups a body holds
            g = 1
            for i, b in zip(order, bodies):
                owner[g] = i
                g += 1 + re.compile(b).groups
            return test, rx, owner

        self._names = one([i for i, r in enumerate(self.rules) if r.name_only])
        self._paths = one([i for i, r in enumerate(self.rules) if not r.name_only])
        self._ready = True

    def decide(self, s: str, name_at: int) -> bool | None:
        """True (ignored), False (kept by a ``!``) or None (no rule matches) for ``s``, the
        path (with '/' after a folder's) whose part below this folder starts at ``len(base)+1``
        and whose last name starts at ``name_at``."""
        if not self._ready:
            self._compile()
        best = -1
        for matcher, at in ((self._names, name_at), (self._paths, len(self.base) + 1 if self.base else 0)):
            if matcher is not None and matcher[0].match(s, at) is not None:
                m = matcher[1].match(s, at)
                best = max(best, matcher[2][m.lastindex or 0])  # type: ignore[union-attr]
        return None if best < 0 else not self.rules[best].negate


class IgnoreRules:
    """Every folder's rules; a deeper folder's decide before its parents', the last match in one."""

    def __init__(self, patterns: list[str] | None = None) -> None:
        self.frames: dict[str, _Frame] = {"": _Frame("")}
        for p in ALWAYS + list(patterns or []):
            self.add(p)

    def add(self, line: str, base: str = "") -> None:
        rule = compile_rule(line)
        if rule:
            self.frames.setdefault(base, _Frame(base)).add(rule)

    def load_dir(self, top: Path, rel: str) -> None:
        for name in IGNORE_FILES:
            f = top / rel / name if rel else top / name
            if f.is_file():
                for line in f.read_text(errors="replace").splitlines():
                    self.add(line, rel)

    def chain(self, rel_dir: str) -> list[_Frame]:
        """The frames that apply to the names in folder ``rel_dir``, deepest first."""
        out = []
        parts = rel_dir.split("/") if rel_dir else []
        for i in range(len(parts), -1, -1):
            f = self.frames.get("/".join(parts[:i]))
            if f is not None and f.rules:
                out.append(f)
        return out

    def ignored(self, rel: str, is_dir: bool, frames: list[_Frame] | None = None) -> bool:
        """Whether the name ``rel`` itself is ignored (its folders are the caller's: a walk does
        not enter an ignored one)."""
        folder = rel.rpartition("/")[0]
        return _decide(self.chain(folder) if frames is None else frames, rel + "/" if is_dir else rel,
                       len(folder) + 1 if folder else 0)


def walk(top: Path, extra: list[str] | None = None, rules_apply: bool = True
         ) -> Iterator[tuple[str, os.stat_result, bool]]:
    """(relative path, lstat, is_dir) of every kept entry under ``top``, parents before children
    (``rules_apply=False``: every entry, no ignore rules at all). One ``scandir`` per folder;
    a folder's ignore files are looked for in its listing, not with a stat each; an ignored
    folder is not entered."""
    rules = IgnoreRules(extra) if rules_apply else None
    stack = [""]
    frames: list[_Frame] = []
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(top / rel_dir if rel_dir else top) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        if rules is not None:
            if any(e.name in IGNORE_FILES for e in entries):
                rules.load_dir(top, rel_dir)
            frames = rules.chain(rel_dir)
        pre = rel_dir + "/" if rel_dir else ""
        name_at = len(pre)
        for e in entries:
            rel = pre + e.name
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:  # gone since the listing
                continue
            is_dir = e.is_dir(follow_symlinks=False)
            if rules is not None and _decide(frames, rel + "/" if is_dir else rel, name_at):
                continue
            yield rel, st, is_dir
            if is_dir:
                stack.append(rel)


def _decide(frames: list[_Frame], s: str, name_at: int) -> bool:
    for f in frames:
        d = f.decide(s, name_at)
        if d is not None:
            return d
    return False
