"""Whether a stored blob still holds the bytes its name says (remote/data/datastore.py).

A job's view is hard links to the store's blobs, and jobs run as root: mode bits stop no
``open(path, "w")``, so a job that rewrites one of its data files in place rewrites the blob and
every other link to it. The store therefore trusts a blob by its name only while the blob's
fingerprint holds: its size, mtime_ns, inode and ctime_ns as the store itself last saw them
(``<root>/cache/blobs.json``). A link moves an inode's ctime, so the store refreshes the print
after every link it makes; a print that moved otherwise is a suspicion, and the blob is hashed
again in full. A blob whose bytes no longer match its name leaves the store: its store name is
unlinked (never the inode: the job that changed it, and any job linking it, keep theirs), so
it is never linked into a new view, and its bytes are stored again from a good copy.
"""

import os
from pathlib import Path
from typing import Any, List, Optional

from remote.stream.hashing import HashCache, file_hash

PRINTS = "blobs.json"


class Prints(HashCache):
    """Blob path -> [size, mtime_ns, inode, ctime_ns, hash]: the plain hash cache's key plus ctime,
    which a write moves even when the writer puts the size and mtime back. Each view rewrites the
    prints of every blob it links (the link moved their ctime): one object, no log to replay."""

    appends = False

    @staticmethod
    def stat_key(st: os.stat_result) -> List[Any]:
        return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


def prints(root: Path) -> Prints:
    return Prints(root / "cache" / PRINTS)


def same_bytes_stat(a: os.stat_result, b: os.stat_result) -> bool:
    """Two stats of one file between which nothing wrote to it (a link or unlink moves ctime only)."""
    return (a.st_ino, a.st_size, a.st_mtime_ns) == (b.st_ino, b.st_size, b.st_mtime_ns)


def sound(pr: Prints, blob: str, h: str, st: os.stat_result) -> bool:
    """Whether ``blob`` (as ``st`` found it) holds the bytes named ``h``: one stat while its print
    holds, a full hash when the print moved (the print then records what was checked)."""
    if pr.get(blob, st) == h:  # type: ignore[arg-type]
        return True
    try:
        got = file_hash(Path(blob)).hexdigest()
        after = os.stat(blob)
    except OSError:
        return False
    if got != h or not same_bytes_stat(st, after):  # damaged, or written to while it was read
        return False
    pr.put(blob, h, after)  # type: ignore[arg-type]
    return True


def relinked(pr: Prints, blob: str, h: str, before: os.stat_result) -> Optional[os.stat_result]:
    """After the store linked or unlinked ``blob`` (sound at ``before``): its print follows the ctime
    that moved; its stat now. None when its size or mtime moved too: a write at that moment, for
    the next check to find."""
    try:
        st = os.stat(blob)
    except OSError:
        return None
    if not same_bytes_stat(before, st):
        return None
    pr.put(blob, h, st)  # type: ignore[arg-type]
    return st


def evict(pr: Prints, blob: str, ino: Optional[int] = None) -> None:
    """Take a damaged blob out of the store: only the store's name goes (while the blob there is
    still inode ``ino``); every view linking it keeps its inode."""
    try:
        if ino is None or os.lstat(blob).st_ino == ino:
            os.unlink(blob)
    except OSError:
        pass
    pr.drop(blob)
