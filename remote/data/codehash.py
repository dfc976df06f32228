"""The hash of a job's code as the laptop computes it (gpujob/config/ledger/code.py ``code_hash``):
each file's path, exec bit and content (a link: its target), in the laptop's walk order (a
folder's entries sorted by name, its files before the folders it holds, those folders last
first). ``rerun`` asks for it: the job starts only when the code it got is the run's it repeats."""

import hashlib
import os
import stat
from typing import List


def file_digest(path: str, st: os.stat_result) -> str:
    """A file's content hash, a link's target (the laptop's ledger uses this one too)."""
    if stat.S_ISLNK(st.st_mode):
        return "link:" + os.readlink(path)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_hash(top: str) -> str:
    h = hashlib.sha256()
    stack: List[str] = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(os.path.join(top, rel_dir) if rel_dir else top) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            rel = rel_dir + "/" + e.name if rel_dir else e.name
            st = e.stat(follow_symlinks=False)
            if e.is_dir(follow_symlinks=False):
                stack.append(rel)
            elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                h.update("{}\0{}\0{}\0".format(rel, 1 if st.st_mode & 0o111 else 0, file_digest(e.path, st)).encode())
    return h.hexdigest()[:16]
