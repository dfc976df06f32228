"""What a sync sends: the local tree's scan, the laptop's record of what the host holds, the plan.

The record (``record.py``: one per host profile, root and remote tree) lists every file
the host holds as ``[size, mtime_ns, inode, ctime_ns, mode, hash]``: the local stat the hash
was taken from, the mode and content hash there; links and folders too; and the digest of
that tree (``stream.tree_digest``), with the local tree's stamps and the GNU find listing the
stamps came from. The agent computes its tree's digest; when it equals the record's, the
record *is* the host's tree and the agent sends no manifest. Then the laptop needs no walk in
Python: an unchanged stamp means nothing to send, a changed one is planned from the
listing's changed lines, looking up only those names in the record and moving its digest by
their entries. A local file whose size, mtime_ns, inode and ctime equal the record's is not
read; one whose stamps were racily close to the clock when recorded (``stream.racy``) is read
again (an edit in the same clock tick keeps every stamp). Without GNU find (BSD find has no
``-printf``) the tree is walked with ``os.scandir``.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpujob.bundle import import_remote
from gpujob.config.ignore import ALWAYS, IGNORE_FILES, IgnoreRules, walk
from gpujob.usecases.sync.record import Record, StaleRecord, listing_stamp

__all__ = ["LocalTree", "Record", "StaleRecord", "TreePlan", "plan_tree", "scan", "sent"]

stream: Any = import_remote("stream")


@dataclass
class LocalTree:
    """A local file or folder as it will be named under ``prefix`` on the host."""

    top: str
    prefix: str
    files: dict[str, tuple[int, int, int, int, int]] = field(default_factory=dict)  # size, mtime_ns, ino, ctime_ns, mode
    links: dict[str, str] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)  # parents before children
    stamp: str | None = None  # digest of every entry's stat; None when one was racily new
    exclude: list[str] | None = None
    use_ignore_files: bool = True
    lazy: bool = False  # its stamp is the record's: not walked in Python, no entries listed
    listing: bytes | None = None  # GNU find's listing the stamp was taken from
    delta: tuple[dict[str, tuple[str, tuple, str | None]], set[str]] | None = None  # changed, removed (no entries)

    def path(self, rel: str) -> str:
        return self.top + "/" + rel if rel else self.top

    def arc(self, rel: str) -> str:
        return self.prefix + "/" + rel if rel else self.prefix


def _stamp(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, stat.S_IMODE(st.st_mode)


PRUNE = [p.rstrip("/") for p in ALWAYS if p.endswith("/") and "*" not in p]  # folders never sent


def drop_racy(listing: bytes, now_ns: int) -> tuple[bytes, bool]:
    """``stream.drop_racy`` in the cost of the racy lines: a line's ctime (its first field,
    fixed width until 2286) is compared as text with the widest racy window's start, and only
    the lines at or past it are parsed and judged by ``stream.racy``."""
    low = max(0, now_ns - stream.RACY_NS)
    cut = f"{low // 10 ** 9}.{low % 10 ** 9:09d}".encode()
    try:
        racy = [line for line in listing.split(b"\0") if line[:len(cut)] >= cut
                and stream.racy(stream.find_ns(line.split(b" ", 1)[0]), now_ns)]
    except ValueError:
        return b"", True
    if not racy:
        return listing, False
    out = b"\0" + listing
    for line in racy:
        out = out.replace(b"\0" + line + b"\0", b"\0")
    return out[1:], True


def scan(top: Path, prefix: str, exclude: list[str] | None = None, use_ignore_files: bool = True,
         record: Record | None = None) -> LocalTree:
    """The entries of a local file or folder (ignore rules applied with ``use_ignore_files``).

    With GNU find and a ``record``: when the stamp is the record's the tree comes back ``lazy``
    (no entries: nothing changed); else when the record kept its find listing, only the names
    whose listing line changed come back (``delta``). Neither walks in Python."""
    t = LocalTree(str(top), prefix, exclude=exclude, use_ignore_files=use_ignore_files)
    now = time.time_ns()
    raw = stream.find_listing(top, PRUNE if use_ignore_files else (), now, allow_racy=True)
    fast = listing = None
    if raw is not None:  # kept: the listing without racy lines (they look changed next time)
        listing, racy_lines = drop_racy(raw, now)
        fast = None if racy_lines else listing_stamp(raw, exclude, use_ignore_files)
    if raw is not None and record is not None and record.lstamp:
        t.stamp, t.listing = fast, listing
        if fast is not None and fast == record.stamp:
            t.lazy = True
            return t
        old = record.old_listing()
        if old is not None and listing_stamp(old, exclude, use_ignore_files) == record.lstamp and not top.is_file():
            t.delta = delta(t, old, raw)
            if t.delta is not None:
                return t
    lines: list[str] = []
    newest = 0
    if top.is_file():
        st = top.stat()
        t.files[""] = _stamp(st)
        lines.append(f"{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0{st.st_ctime_ns}")
        newest = max(st.st_mtime_ns, st.st_ctime_ns)
    files, links, dirs, add = t.files, t.links, t.dirs, lines.append
    for rel, st, is_dir in ([] if top.is_file() else walk(top, exclude, use_ignore_files)):
        mode, mt, ct = st.st_mode, st.st_mtime_ns, st.st_ctime_ns
        if is_dir:
            dirs.append(rel)
        elif stat.S_ISREG(mode):
            if stream.is_tmp_name(rel[rel.rfind("/") + 1:]):
                continue
            files[rel] = (st.st_size, mt, st.st_ino, ct, stat.S_IMODE(mode))
        elif stat.S_ISLNK(mode):
            links[rel] = os.readlink(t.path(rel))
        else:
            continue
        add(f"{rel}\0{mode}\0{st.st_size}\0{mt}\0{st.st_ino}\0{ct}")
        if mt > newest or ct > newest:
            newest = max(mt, ct)
    if raw is not None:  # the find stamp taken before the walk: a change since makes the next one differ
        t.stamp, t.listing = fast, listing
    elif not stream.racy(newest, now):
        t.stamp = hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).hexdigest()
    return t


def _ignore_file_folders(listing: bytes) -> set[str]:
    """The folders holding an ignore file, found in find's listing by a search in C (not a
    Python loop over its lines): a line's path is its 7th field, after six spaces."""
    out = set()
    for name in IGNORE_FILES:
        needle = name.encode() + b"\0"
        i = listing.find(needle)
        while i >= 0:
            start = listing.rfind(b"\0", 0, i) + 1
            parts = listing[start:i + len(needle) - 1].split(b" ", 6)
            if len(parts) == 7 and parts[6].rpartition(b"/")[2] == name.encode():
                out.add(os.fsdecode(parts[6].rpartition(b"/")[0]))
            i = listing.find(needle, i + 1)
    return out


def delta(t: LocalTree, old: bytes, new: bytes) -> tuple[dict[str, tuple[str, tuple, str | None]], set[str]] | None:
    """The names whose find line changed: {rel: (type f/d/l, stat tuple, link target)} for the
    new or changed ones (ignore rules applied), and the rels of lines gone. None when an ignore
    file changed (every name may be in or out now: walk instead)."""
    olds, news = set(old.split(b"\0")), set(new.split(b"\0"))
    changed: dict[str, tuple[str, tuple, str | None]] = {}
    removed: set[str] = set()
    for line in olds - news:
        if line:
            removed.add(os.fsdecode(line.split(b" ", 6)[6]))
    added = []
    for line in news - olds:
        if line:
            c, m, bkind, mode, size, ino, brel = line.split(b" ", 6)
            added.append((os.fsdecode(brel), bkind.decode(), (int(size), stream.find_ns(m), int(ino), stream.find_ns(c),
                                                              int(mode, 8))))
    if t.use_ignore_files and any(r.rpartition("/")[2] in IGNORE_FILES for r in removed | {a[0] for a in added}):
        return None
    rules = None
    if t.use_ignore_files:
        rules = IgnoreRules(t.exclude)
        for folder in sorted(_ignore_file_folders(new)):
            rules.load_dir(Path(t.top), folder)
    for rel, kind, st in added:
        if kind not in ("f", "d", "l") or not rel:
            continue
        if rules is not None:
            parts = rel.split("/")
            if any(rules.ignored("/".join(parts[:i]), True) for i in range(1, len(parts))) or rules.ignored(rel, kind == "d"):
                continue
        if kind == "f" and stream.is_tmp_name(rel.rpartition("/")[2]):
            continue
        changed[rel] = (kind, st, os.readlink(t.path(rel)) if kind == "l" else None)
    return changed, removed - set(changed)


def record_key(st: tuple | os.stat_result, now_ns: int) -> list[int]:
    """The stat part of a record entry; a stat racily close to ``now_ns`` gets mtime -1 (never equal)."""
    if isinstance(st, os.stat_result):
        st = _stamp(st)
    size, mtime, ino, ctime = st[:4]
    if stream.racy(max(mtime, ctime), now_ns):
        mtime = -1
    return [size, mtime, ino, ctime]


@dataclass
class TreePlan:
    """What to send and delete for one tree, and the record it leaves once the upload succeeded."""

    local: LocalTree
    send: list[Any] = field(default_factory=list)  # stream.Item
    delete: list[str] = field(default_factory=list)
    unchanged: int = 0
    resumed_bytes: int = 0
    hashed: int = 0  # local files read to compare their content
    after: Record = field(default_factory=lambda: Record(None))
    record: Record | None = None  # the record it started from (``after`` when that still holds)


def plan_tree(local: LocalTree, remote: dict[str, Any], record: Record, mirror: bool) -> TreePlan:
    """What to send so the host's tree matches ``local`` (and, with ``mirror``, what to delete).

    ``remote`` is the agent's answer for this tree: ``same`` (its digest is the record's: the
    record is its content) or its manifest with content hashes."""
    plan = TreePlan(local, record=record)
    if remote.get("same") and local.stamp is not None and local.stamp == record.stamp:
        plan.unchanged = record.count  # both ends as the record left them: no entry is looked at
        plan.after = record
        return plan
    if remote.get("same") and local.delta is not None:
        return _plan_delta(plan, local, record, remote, mirror)
    if local.lazy or local.delta is not None:  # the host changed: every local entry is needed after all
        local = plan.local = scan(Path(local.top), local.prefix, local.exclude, local.use_ignore_files)
    after = plan.after
    after.path = record.path
    after.stamp, after.listing = local.stamp, local.listing
    after.exclude, after.use_ignore_files = local.exclude, local.use_ignore_files
    after.set({}, {}, [])
    now = time.time_ns()
    if remote.get("same"):
        base_files = {rel: (v[0], v[4], v[5]) for rel, v in record.files.items()}  # size, mode, hash
        base_links, base_dirs = dict(record.links), set(record.dirs)
    else:
        base_files, base_links = {}, {}
        for rel, v in remote.get("files", {}).items():
            if v[3] is not None:
                base_links[rel] = v[3]
            else:
                base_files[rel] = (v[0], v[2], v[4])
        base_dirs = set(remote.get("dirs", []))
    parts: dict[str, list[str]] = remote.get("parts", {})
    known = record.files

    for rel in local.dirs:
        if rel not in base_dirs:
            plan.send.append(stream.Item(local.arc(rel), local.path(rel), mode=0o755, is_dir=True))
    after.dirs.extend(local.dirs)
    for rel, st in local.files.items():
        _plan_file(plan, rel, st, base_files.get(rel), known.get(rel), parts, now)
    for rel, target in local.links.items():
        if base_links.get(rel) != target:
            plan.send.append(stream.Item(local.arc(rel), local.path(rel), link=target))
        after.links[rel] = target
    names = set(local.files) | set(local.links) | set(local.dirs)
    if mirror:
        plan.delete = [local.arc(rel) for rel in list(base_files) + list(base_links) + sorted(base_dirs)
                       if rel and rel not in names]
    else:  # the host keeps what it has beyond this tree (shared data)
        for rel, (size, mode, h) in base_files.items():
            if rel not in names:
                after.files[rel] = [size, -1, 0, 0, mode, h]
        for rel, target in base_links.items():
            if rel not in names:
                after.links[rel] = target
        after.dirs.extend(sorted(d for d in base_dirs if d not in names))
    return plan


def _plan_file(plan: TreePlan, rel: str, st: tuple, b: tuple | None, k: list[Any] | None,
               parts: dict[str, list[str]], now: int) -> None:
    """Send local file ``rel`` (stat tuple ``st``) unless the host's (size, mode, hash) ``b``
    shows the same content: the record entry ``k`` gives its hash while its stat is the same,
    else the file is read."""
    size, mtime, ino, ctime, mode = st
    local = plan.local
    if b is not None and b[0] == size and (b[1] & 0o111) == (mode & 0o111) and b[2] is not None:
        h = k[5] if k is not None and k[0] == size and k[1] == mtime and k[2] == ino and k[3] == ctime else None
        key = [size, mtime, ino, ctime]
        if h is None:
            try:
                fresh = os.stat(local.path(rel))
                h = stream.file_hash(local.path(rel)).hexdigest()
            except OSError:
                h = None
            else:
                plan.hashed += 1
                key = record_key(fresh, now)
        if h == b[2]:
            plan.unchanged += 1
            plan.after.put_file(rel, key + [b[1], h])
            return
    it = stream.Item(local.arc(rel), local.path(rel), size, mtime, mode)
    if parts.get(rel) and size > stream.CHUNK:
        it.prefix = stream.matching_prefix(Path(it.path), parts[rel], size)[: (size - 1) // stream.CHUNK]
        plan.resumed_bytes += len(it.prefix) * stream.CHUNK
    plan.send.append(it)


def _plan_delta(plan: TreePlan, local: LocalTree, record: Record, remote: dict[str, Any], mirror: bool) -> TreePlan:
    """The plan when the host holds what the record says and only ``local.delta`` changed here:
    only the names the delta touches are looked up in the record; the record it leaves is the
    old one plus their changes (``Record.derive``)."""
    changed, removed = local.delta  # type: ignore[misc]
    after = plan.after
    after.derive(record)
    after.stamp, after.listing = local.stamp, local.listing
    after.exclude, after.use_ignore_files = local.exclude, local.use_ignore_files
    old = record.lookup(set(changed) | removed)
    if mirror:
        gone = sorted(rel for rel in removed if old[rel] is not None)
        plan.delete = [local.arc(rel) for rel in gone]
        for rel in gone:
            after.put(rel, None)
    parts: dict[str, list[str]] = remote.get("parts", {})
    now = time.time_ns()
    for rel in sorted(changed):  # parents before children
        kind, st, target = changed[rel]
        was = old[rel]
        if kind == "d":
            if was is None or was[0] != "d":
                plan.send.append(stream.Item(local.arc(rel), local.path(rel), mode=0o755, is_dir=True))
            after.put(rel, ("d",))
        elif kind == "l":
            if was is None or was[0] != "l" or was[1] != target:
                plan.send.append(stream.Item(local.arc(rel), local.path(rel), link=target))
            after.put(rel, ("l", target))
        else:
            k = was[1] if was is not None and was[0] == "f" else None
            after.put(rel, None)  # until found equal here or sent
            _plan_file(plan, rel, st, (k[0], k[4], k[5]) if k else None, k, parts, now)
    plan.unchanged = after.count  # files the delta did not touch, and those found equal
    return plan


def sent(plan: TreePlan, rel: str, item: Any, digest: str, now_ns: int) -> None:
    """Record a file the stream carried: the stat it was read under, its mode and hash."""
    st = item.st
    if st is None:
        return
    plan.after.put_file(rel, record_key(st, now_ns) + [item.mode & 0o7777, digest])
