"""The laptop's record of what it left on a host under one remote tree, kept so that a sync
costs what changed: reading it, updating its digest and writing it back are O(changed).

Files, for a record named ``N`` (``<cache>/sync/N.json`` is its name; see ``for_tree``):

- ``N.<id>.json``, the base: a header line ``{"v", "id", "count"}``, then one JSON array per
  entry, ``[rel, "f", size, mtime_ns, inode, ctime_ns, mode, hash]``, ``[rel, "l", target]`` or
  ``[rel, "d"]``. Written whole (to a temporary name, then renamed) only by a full plan or a
  compaction.
- ``N.log``: the changes since the base, the same arrays plus ``[rel, "-"]`` for a name gone,
  appended by each sync that planned from a delta; the later line of a name wins.
- ``N.head``: the commit point, replaced atomically last: the tree's digest, the local stamps,
  the file count, which base, and how many bytes of the log count with their sha256. Log
  bytes past that (a sync killed while appending) are not part of the record and are cut
  before the next append; a log shorter than that or with other bytes, a base that is missing
  or has another id makes the record stale (``StaleRecord``: the host's manifest decides, and
  the record is rebuilt from it).
- ``N.find``: the GNU find listing the local stamp was taken from (``tree.scan``).

The digest is ``stream.tree_digest``: a sum of one hash per entry, so a few changed entries
move it by their own terms (the digest of the old ones out, of the new ones in). A record in
the previous format (one JSON document and a head without ``v``) is read once, given the new
digest from its entries and rewritten; one that cannot be read is dropped.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path
from typing import Any, TypedDict

from gpujob.bundle import import_remote
from gpujob.config.paths import cache_dir

stream: Any = import_remote("stream")
FORMAT = 2
COMPACT_FRACTION = 4  # a log past a quarter of its base (and COMPACT_MIN bytes) is folded into a new base
COMPACT_MIN = 64 << 10
MANY = 64  # more names to look up than this: parse the whole record once instead of searching its bytes

Entry = tuple  # ("f", [size, mtime_ns, ino, ctime_ns, mode, hash]) | ("l", target) | ("d",)


class StaleRecord(Exception):
    """A record's entries could not be read: ask the host for its manifest instead."""


def _line(rel: str, e: Entry | None) -> str:
    if e is None:
        return json.dumps([rel, "-"])
    if e[0] == "f":
        return json.dumps([rel, "f", *e[1]])
    return json.dumps([rel, *e])


def _entry(row: list[Any]) -> Entry | None:
    kind = row[1]
    if kind == "f":
        return ("f", row[2:8])
    if kind == "l":
        return ("l", row[2])
    if kind == "d":
        return ("d",)
    if kind == "-":
        return None
    raise ValueError(f"unknown entry kind {kind!r}")


def digest_of(entries: dict[str, Entry]) -> str | None:
    """``stream.tree_digest`` of some entries (their share of a tree's digest)."""
    files: dict[str, list[Any]] = {}
    dirs = []
    for rel, e in entries.items():
        if e[0] == "f":
            v = e[1]
            files[rel] = [v[0], 0, v[4], None, v[5]]
        elif e[0] == "l":
            files[rel] = [0, 0, 0o777, e[1], None]
        else:
            dirs.append(rel)
    return stream.tree_digest(files, dirs)


def _shift(digest: str, out: str, into: str) -> str:
    """``digest`` with the share ``out`` taken away and ``into`` added (the digest is a sum)."""
    return f"{(int(digest, 16) - int(out, 16) + int(into, 16)) % (1 << 256):064x}"


def listing_stamp(listing: bytes, exclude: list[str] | None, use_ignore_files: bool) -> str:
    """The stamp of a local tree from its find listing and the rules that choose its entries."""
    return "find:" + hashlib.sha256(json.dumps([hashlib.sha256(listing).hexdigest(), exclude or [],
                                                use_ignore_files]).encode()).hexdigest()


class RecordHead(TypedDict, total=False):
    """A record's ``.head`` file: the digest of what the host holds, and the base and log it is kept in."""

    v: int  # FORMAT (an older head has none: ``_read_previous``)
    base: str  # the base file's id
    log: int  # the log's length in bytes past the base
    logsum: str  # the log's SHA-256
    digest: str | None
    stamp: str | None
    lstamp: str | None  # the saved listing's stamp
    count: int


class Record:
    """What the laptop last left on the host under one remote tree (see the module doc).

    Its head is read first; the entries only when a plan needs them: a delta plan looks up the
    names it touches (``lookup``), a full plan loads every entry (``files``, ``links``, ``dirs``).
    A record made by ``derive`` holds only its changes to another (``put``) until it is saved."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.digest: str | None = None
        self.stamp: str | None = None
        self.count = 0  # files, for the report of a no-op that reads no entries
        self.listing: bytes | None = None  # to save beside it (see ``tree.scan``)
        self.lstamp: str | None = None  # the saved listing's stamp
        self.exclude: list[str] | None = None  # the rules the listing's stamp is taken with
        self.use_ignore_files = True
        self.parent: Record | None = None  # set by ``derive``: this record is the parent plus ``changes``
        self.changes: dict[str, Entry | None] = {}
        self._head: RecordHead = {}
        self._log: bytes | None = None
        self._base: bytes | None = None
        self._seen: dict[str, Entry | None] = {}  # what ``lookup`` found
        self._entries: tuple[dict[str, list[Any]], dict[str, str], list[str]] | None = None if path else ({}, {}, [])
        if path is None:
            return
        try:
            with open(self._side(".head")) as f:
                head = json.load(f)
            if head.get("v") != FORMAT:
                self._read_previous(head)
                return
            self.digest, self.stamp, self.count = head["digest"], head["stamp"], head["count"]
            self.lstamp = head.get("lstamp")
            self._head = head
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self._entries = ({}, {}, [])

    def _side(self, suffix: str) -> Path:
        return Path(str(self.path)).with_suffix(suffix)

    def _base_path(self, base_id: str) -> Path:
        p = Path(str(self.path))
        return p.with_name(f"{p.stem}.{base_id}.json")

    @staticmethod
    def for_tree(host_key: str, tree: str) -> Record:
        name = hashlib.sha256(json.dumps([host_key, tree]).encode()).hexdigest()[:24]
        return Record(cache_dir() / "sync" / f"{name}.json")

    @staticmethod
    def blank(path: Path | None) -> Record:
        """A record that knows nothing, saved to ``path`` (a stale one's replacement)."""
        r = Record(None)
        r.path = path
        return r

    # ---- reading ------------------------------------------------------------------------
    def _stale(self) -> StaleRecord:
        self.digest = self.stamp = None
        self._entries = ({}, {}, [])
        try:
            os.unlink(self._side(".head"))
        except (OSError, TypeError):
            pass
        return StaleRecord(str(self.path))

    def _bytes(self) -> tuple[bytes, bytes]:
        """The base's bytes and the committed log's, checked against the head."""
        if self._base is None or self._log is None:
            try:
                with open(self._base_path(self._head["base"]), "rb") as f:
                    base = f.read()
                header = json.loads(base[: base.index(b"\n")])
                if header.get("v") != FORMAT or header.get("id") != self._head["base"]:
                    raise ValueError("not the base its head names")
                n = self._head["log"]
                log = b""
                if n:
                    with open(self._side(".log"), "rb") as f:
                        log = f.read(n)
                if len(log) != n or hashlib.sha256(log).hexdigest() != self._head["logsum"]:
                    raise ValueError("not the log its head names")
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                raise self._stale() from None
            self._base, self._log = base, log
        return self._base, self._log

    def lookup(self, rels: set[str]) -> dict[str, Entry | None]:
        """Each name's entry (None where the record has none), without parsing the whole record
        when the names are few: the log's last line for it, else the base's."""
        if self.parent is not None:
            mine = {rel: self.changes[rel] for rel in rels if rel in self.changes}
            return {**self.parent.lookup(rels - mine.keys()), **mine}
        todo = rels - self._seen.keys()
        if todo and (self._entries is not None or len(todo) > MANY):
            files, links, dirs = self._load()
            dirset = set(dirs)
            for rel in todo:
                self._seen[rel] = (("f", files[rel]) if rel in files else ("l", links[rel]) if rel in links
                                   else ("d",) if rel in dirset else None)
        elif todo:
            base, log = self._bytes()
            log = b"\n" + log
            try:
                for rel in todo:
                    needle = b"\n[" + json.dumps(rel).encode() + b","
                    i = log.rfind(needle)
                    text, i = (log, i) if i >= 0 else (base, base.find(needle))
                    self._seen[rel] = None if i < 0 else _entry(json.loads(text[i + 1: text.index(b"\n", i + 1)]))
            except (ValueError, IndexError, TypeError):
                raise self._stale() from None
        return {rel: self._seen[rel] for rel in rels}

    def _load(self) -> tuple[dict[str, list[Any]], dict[str, str], list[str]]:
        if self._entries is None:
            if self.parent is not None:
                files, links, dirs = (dict(self.parent.files), dict(self.parent.links), list(self.parent.dirs))
                self._apply(files, links, dirs, self.changes.items())
                self._entries = (files, links, dirs)
                return self._entries
            base, log = self._bytes()
            try:
                rows = json.loads(b"[" + (base[base.index(b"\n") + 1:] + log).rstrip(b"\n").replace(b"\n", b",") + b"]")
                files, links, dirs = {}, {}, []
                self._apply(files, links, dirs, ((row[0], _entry(row)) for row in rows))
            except (ValueError, IndexError, TypeError):
                raise self._stale() from None
            self._entries = (files, links, dirs)
        return self._entries

    @staticmethod
    def _apply(files: dict[str, list[Any]], links: dict[str, str], dirs: list[str], changes: Any) -> None:
        dirset = set(dirs)
        for rel, e in changes:
            files.pop(rel, None)
            links.pop(rel, None)
            if rel in dirset and (e is None or e[0] != "d"):
                dirset.discard(rel)
            if e is None:
                continue
            if e[0] == "f":
                files[rel] = list(e[1])
            elif e[0] == "l":
                links[rel] = e[1]
            elif rel not in dirset:
                dirset.add(rel)
                dirs.append(rel)
        if len(dirset) != len(dirs):
            dirs[:] = [d for d in dirs if d in dirset]

    def _read_previous(self, head: RecordHead) -> None:
        """A record of the previous format: its entries (checked against its head, as then) with
        the new digest, rewritten in this format; dropped when it cannot be read."""
        try:
            with open(Path(str(self.path)), encoding="utf-8", errors="surrogateescape") as f:
                doc = json.load(f)
            if doc.get("digest") != head["digest"]:
                raise ValueError("not the entries its head names")
            self._entries = (doc["files"], doc["links"], doc["dirs"])
            self.stamp, self.lstamp = head["stamp"], head.get("lstamp")
            self.digest = self.compute_digest()
            self.count = len(self.files)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self._stale()
            return
        # the listing it kept stays (its stamp is checked before it is used)
        self._save_full(lstamp=self.lstamp if self._side(".find").exists() else None)
        try:
            os.unlink(Path(str(self.path)))
        except OSError:
            pass

    @property
    def files(self) -> dict[str, list[Any]]:
        return self._load()[0]

    @property
    def links(self) -> dict[str, str]:
        return self._load()[1]

    @property
    def dirs(self) -> list[str]:
        return self._load()[2]

    def set(self, files: dict[str, list[Any]], links: dict[str, str], dirs: list[str]) -> None:
        self._entries = (files, links, dirs)
        self.parent = None

    def old_listing(self) -> bytes | None:
        """The find listing the record's stamp was taken from (None when it kept none)."""
        try:
            with open(self._side(".find"), "rb") as f:
                return f.read()
        except (OSError, TypeError):
            return None

    # ---- changing -----------------------------------------------------------------------
    def derive(self, parent: Record) -> None:
        """Become ``parent`` plus the changes ``put`` will add (saved by appending them)."""
        self.path, self.parent, self.changes = parent.path, parent, {}
        self.digest, self.count, self._entries = parent.digest, parent.count, None

    def put(self, rel: str, e: Entry | None) -> None:
        """Name ``rel`` is now ``e`` (None: gone). ``e``'s lists are not copied."""
        if self.parent is None:
            files, links, dirs = self._load()
            self._apply(files, links, dirs, [(rel, e)])
            self._seen.pop(rel, None)
            return
        was = self.changes[rel] if rel in self.changes else self.parent.lookup({rel})[rel]
        if was == e and rel not in self.changes:  # a folder whose stamps moved: nothing to record
            return
        self.count += (e is not None and e[0] == "f") - (was is not None and was[0] == "f")
        self.changes[rel] = e

    def put_file(self, rel: str, v: list[Any]) -> None:
        self.put(rel, ("f", v))

    def compute_digest(self) -> str | None:
        """The tree's digest: from the parent's and the changed entries' when derived, else from
        every entry."""
        if self.parent is not None:
            if self.parent.digest is None:
                return None
            old = self.parent.lookup(set(self.changes))
            out = digest_of({rel: e for rel, e in old.items() if e is not None})
            into = digest_of({rel: e for rel, e in self.changes.items() if e is not None})
            return None if out is None or into is None else _shift(self.parent.digest, out, into)
        entries: dict[str, Entry] = {rel: ("f", v) for rel, v in self.files.items()}
        entries.update((rel, ("l", t)) for rel, t in self.links.items())
        entries.update((rel, ("d",)) for rel in self.dirs)
        return digest_of(entries)

    # ---- writing ------------------------------------------------------------------------
    def save(self) -> None:
        """Append the changes to the parent's log, or (no parent, or a log grown past a fraction
        of its base) write a new base; then the listing; the head last (the commit)."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with import_remote("core.atomicfile").locked(self.path):  # two syncs of one tree at once: one at a time
            if self.parent is not None and self.parent._head and _read_head(self._side(".head")) != self.parent._head:
                return  # another sync saved this tree's record since it was read: that one stands
            self._save_locked()

    def _save_locked(self) -> None:
        lstamp = self._save_listing()
        p = self.parent
        if p is not None and p._head and p.digest is not None:
            base: bytes | None
            log: bytes | None
            try:
                base, log = p._bytes()
            except StaleRecord:
                base = log = None
            if base is not None and log is not None:
                add = "".join(_line(rel, e) + "\n" for rel, e in sorted(self.changes.items())).encode()
                if len(log) + len(add) <= max(COMPACT_MIN, len(base) // COMPACT_FRACTION):
                    with open(self._side(".log"), "ab") as f:
                        f.truncate(len(log))  # bytes of a killed append, never committed
                        f.write(add)
                    self._commit({**p._head, "log": len(log) + len(add), "logsum": hashlib.sha256(log + add).hexdigest()},
                                 lstamp)
                    return
        try:
            self._save_full(lstamp)
        except StaleRecord:  # the parent's entries are lost: no record, the next sync asks the host
            pass

    def _save_listing(self) -> str | None:
        side = self._side(".find")
        if self.listing is not None:
            _write(side, self.listing)
            return listing_stamp(self.listing, self.exclude, self.use_ignore_files)
        try:
            os.unlink(side)
        except OSError:
            pass
        return None

    def _save_full(self, lstamp: str | None) -> None:
        files, links, dirs = self._load()
        base_id = secrets.token_hex(6)
        rows = [json.dumps([rel, "f", *v]) for rel, v in files.items()]
        rows += [json.dumps([rel, "l", t]) for rel, t in links.items()]
        rows += [json.dumps([rel, "d"]) for rel in dirs]
        text = json.dumps({"v": FORMAT, "id": base_id, "count": len(files)}) + "\n" + "".join(r + "\n" for r in rows)
        _write(self._base_path(base_id), text.encode())
        self.count = len(files)
        self._commit({"v": FORMAT, "base": base_id, "log": 0, "logsum": hashlib.sha256(b"").hexdigest()}, lstamp)
        p = Path(str(self.path))
        for old in p.parent.glob(f"{p.stem}.*.json"):
            if old.name != self._base_path(base_id).name:
                try:
                    os.unlink(old)
                except OSError:
                    pass

    def _commit(self, head: RecordHead, lstamp: str | None) -> None:
        self.lstamp = lstamp
        head.update({"digest": self.digest, "stamp": self.stamp, "lstamp": lstamp, "count": self.count})
        _write(self._side(".head"), json.dumps(head).encode())
        self._head = head


def _write(path: Path, data: bytes) -> None:
    import_remote("core.atomicfile").write(path, data, 0o600, durable=False)  # a cache: every use is checked by digest


def _read_head(path: Path) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
