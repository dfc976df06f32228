"""``pull --include`` globs over a job's paths, with the meanings of ``.gitignore``: a pattern without a
slash matches a name at any depth (``*tfevents*``, ``tb``); one with a slash is taken from the job
folder (``tb/*``, ``/output.log``); ``*``, ``?`` and ``[...]`` stay within a name, ``**`` spans
folders (``code/**/runs``); a trailing ``/`` matches folders only. A folder that matches brings
everything under it."""

import re
from typing import Callable, List, Optional, Set

MAGIC = re.compile(r"[*?\[\\]")


def _body(glob: str) -> str:
    """The regex of ``glob``'s path (no anchors)."""
    out = []  # type: List[str]
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        if glob.startswith("**", i) and (i == 0 or glob[i - 1] == "/"):
            i += 2
            if i < n and glob[i] == "/":  # "**/": any folders, or none
                out.append("(?:.*/)?")
                i += 1
            else:
                out.append(".*")
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(glob[i + 1]))
            i += 1
        elif c == "[" and "]" in glob[i + 2:]:
            end = glob.index("]", i + 2)
            inner = glob[i + 1:end]
            neg = inner[:1] in ("!", "^")
            inner = inner[1:] if neg else inner
            out.append("(?!/)[" + ("^" if neg else "") + inner.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def literal(path: str) -> str:
    """A glob matching ``path`` alone (its glob characters escaped)."""
    return MAGIC.sub(lambda m: "\\" + m.group(0), path)


def _clean(glob: str) -> str:
    glob = glob.strip()
    while glob.startswith("./"):
        glob = glob[2:]
    return glob


def tops(globs: List[str]) -> Optional[Set[str]]:
    """The top-level names of the job folder ``globs`` can reach; None when any (a glob without a
    slash, or a wildcard in its first name): a pull walks only those."""
    out = set()  # type: Set[str]
    for g in map(_clean, globs):
        path = g.rstrip("/").lstrip("/")
        first = path.split("/", 1)[0]
        if "/" not in g.rstrip("/") or MAGIC.search(first):
            return None
        out.add(first)
    return out


def matcher(globs: List[str]) -> Callable[[str], bool]:
    """Whether a path relative to the job folder ("tb/events.out.tfevents.1") is one of ``globs``
    or lies under a folder that is."""
    parts = []  # type: List[str]
    for g in map(_clean, globs):
        folder = g.endswith("/")
        g = g.rstrip("/")
        if not g:
            continue
        anchored = "/" in g
        body = _body(g.lstrip("/"))
        parts.append(("" if anchored else "(?:.*/)?") + body + ("/.+" if folder else "(?:/.+)?"))
    if not parts:
        return lambda rel: False
    rx = re.compile("(?:" + ")|(?:".join(parts) + ")", re.S)
    return lambda rel: rx.fullmatch(rel) is not None
