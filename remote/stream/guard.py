"""Where received names may land: no traversal, no path through a symlink leaving the
destination, and (unless allowed) no symlink pointing out of it."""

import os
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .format import TransferError
from .parts import is_tmp_name

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def check_name(name: Any) -> List[str]:
    """The parts of a relative name; refuses absolute names, ``..``, ``.`` and empty parts."""
    if not isinstance(name, str) or not name or name[0] == "/" or "\0" in name:
        raise TransferError("refusing {!r}: it would land outside the destination".format(name))
    parts = name.split("/")
    if ".." in parts or "" in parts or "." in parts:
        raise TransferError("refusing {!r}: it would land outside the destination".format(name))
    if is_tmp_name(parts[-1]):  # a sender never lists one; a link there would be written through (a part file)
        raise TransferError("refusing {!r}: the name of a receiver's temporary file".format(name))
    return parts


class Guard:
    """Where names land under ``base``: refuses traversal, paths through symlinks that leave
    ``base`` and (unless ``links_out``) symlinks pointing outside it. A folder's real path is
    resolved once and cached until a symlink is written."""

    def __init__(self, base: Path, links_out: bool, plain: bool = False) -> None:
        self.base = str(base)
        self.plain = plain  # names shown and kept on the user's machine: no control character
        self.root = os.path.realpath(self.base)
        self.links_out = links_out
        self.parents: Dict[str, str] = {}
        self.skipped = []  # type: List[str]  # "name -> target" of links not kept (they lead out)
        self.made = []  # type: List[str]  # links written, checked again once the stream is applied

    def inside(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + "/") or self.root == "/"

    def place(self, name: Any) -> Tuple[str, str]:
        """(real parent folder, leaf) of ``name``; the leaf itself is never followed."""
        check_name(name)
        if self.plain and _CONTROL.search(name):
            # a newline splits every script's file list; an escape sequence reaches whatever terminal lists DEST
            raise TransferError("refusing {!r}: a name with a control character (a newline, an escape)".format(name))
        rel_parent, _, leaf = name.rpartition("/")
        parent = self.parents.get(rel_parent)
        if parent is None:
            parent = os.path.realpath(os.path.join(self.base, rel_parent)) if rel_parent else self.root
            if not self.inside(parent):
                raise TransferError("refusing {!r}: a symlink on its way points outside {}".format(name, self.base))
            self.parents[rel_parent] = parent
        return parent, leaf

    def link(self, name: str, parent: str, target: Any) -> bool:
        """Whether to write a symlink: one that resolves outside ``base`` is skipped (unless
        links may point anywhere). Resolved for real, through the links already written, the
        way secure tar extraction does: a chain of links fools a textual check."""
        if not isinstance(target, str) or not target or "\0" in target:
            raise TransferError("refusing link {!r} -> {!r}: not a link target".format(name, target))
        if self.links_out:
            return True
        if target.startswith("/") or not self.inside(os.path.realpath(os.path.join(parent, target))):
            self.skipped.append("{} -> {}".format(name, target))
            return False
        return True

    def recheck(self) -> None:
        """Remove links written here that resolve outside ``base`` now that every entry is in
        place (a later link can redirect an earlier one), until none does."""
        while not self.links_out:
            bad = [p for p in self.made if os.path.islink(p) and not self.inside(os.path.realpath(p))]
            if not bad:
                return
            for p in bad:
                self.skipped.append("{} -> {}".format(os.path.relpath(p, self.root), os.readlink(p)))
                os.unlink(p)
                self.made.remove(p)


def safe_target(base: Path, name: str, kind: str = "f", link: Optional[str] = None, links_out: bool = False) -> Path:
    """Where entry ``name`` (``kind`` f, d or l) lands under ``base``; raises ``TransferError``
    for traversal, paths through links that leave ``base``, other kinds of entry, and
    (unless ``links_out``) links pointing outside."""
    if kind not in ("f", "d", "l"):
        raise TransferError("refusing {!r}: not a file, folder or symlink".format(name))
    g = Guard(base, links_out)
    parent, leaf = g.place(name)
    if kind == "l" and not g.link(name, parent, link):
        raise TransferError("refusing link {!r} -> {!r}: it points outside {}".format(name, link, base))
    return Path(parent) / leaf
