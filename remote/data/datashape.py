"""A data tree's shape: its files' relative names and sizes, as one digest (no content read).

The laptop sends the shape of a ``data:`` entry the host has no record of for this project; the
agent seeds that project's staging from another project's entry of the same ``dst`` and the same
shape (remote/data/datastore.py ``seed``), so a dataset already on the host is not sent again. The
manifest still compares content hashes: a shape is only a hint, never trusted for the bytes.
Standard library only: both sides import it.
"""

import hashlib
import json
import os
from typing import Any, List, Optional

MAX_FILES = 200000  # past this the listing costs more than it can save: no hint


def shape(path: str) -> Optional[str]:
    """The digest of ``[[rel, size], ...]`` (a link's size -1) under ``path``; None when it is
    missing or holds more than ``MAX_FILES`` files."""
    rows: List[Any] = []
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if os.path.islink(path):
        rows.append(["", -1])
    elif not os.path.isdir(path):
        rows.append(["", st.st_size])
    else:
        for dirpath, dirnames, filenames in os.walk(path):
            rel = os.path.relpath(dirpath, path)
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                full = os.path.join(dirpath, name)
                r = name if rel == "." else rel.replace(os.sep, "/") + "/" + name
                try:
                    rows.append([r, -1 if os.path.islink(full) else os.lstat(full).st_size])
                except OSError:
                    return None
                if len(rows) > MAX_FILES:
                    return None
    rows.sort()
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode("utf-8", "surrogateescape")).hexdigest()[:32]
