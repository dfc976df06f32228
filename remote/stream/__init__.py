"""Verified, resumable file streams shared by both ends (upload receive, pull extract, move).

Standard library only, Python 3.8+, no imports from the rest of ``remote``: the laptop loads
this package by path (``gpujob.bundle.import_remote("stream")``), so its modules import each
other relatively. The wire format is gpujob's own framing, optionally wrapped whole in
gzip/xz/bz2 (the reader tells them apart by their magic bytes): ``GJS1``, then records, each
one type byte, a 4-byte big-endian length and that many bytes of JSON header, then the payload
the header announces:

- ``B`` (batch): small files (at most one chunk), folders and symlinks, up to ``BATCH_FILES``
  entries or ``BATCH_BYTES``: ``[["f", name, mode, mtime_ns, size, hash] | ["d", name, mode] |
  ["l", name, target], ...]``, then the files' bytes concatenated in that order (tar headers
  and one Python call chain per member cost more than everything else on a tree of small
  files);
- ``F`` (large file): ``{"n", "mode", "mtime", "size", "off"}``, then bytes ``off..size``
  (``off``, a whole number of chunks, resumes a part file), then a ``V`` record ``{"h"}``;
- ``X``: ``{"delete": [names]}``; ``E``: the end (a stream without it was cut).

A file is received under a short temporary name in its folder and renamed into place only
after its hash checks out, so it is never visible half-written under its final name (and the
rename gives a new inode, so hard-linked job snapshots keep their old content). Small files
are verified in memory and written by a few threads; the receiver makes them durable before it
saves its hash cache: an fsync each when there are at most ``FSYNC_EACH``, else one ``syncfs``
for the stream. The part file of a large file keeps its verified prefix, synced before its
sidecar lists the prefix's chunk hashes, so a cut transfer resumes where it stopped. Mtimes
travel in nanoseconds.

Modules, lowest first: ``format`` (constants, framing, ``Item``, ``Compressed``), ``hashing``
(content hash, ``HashCache``), ``parts`` (temporary names, part files, sidecars), ``guard``
(where names may land), ``durable`` (fsync, replace, remove), ``send`` (``write_items``),
``writers`` (the receiver's writing threads), ``receive`` (``read_items``, ``delete_paths``),
``tree`` (listing, stamps, digests); ``ranges`` (a large file's byte ranges over several
channels into one part file; imported on its own, by the ``range`` verb and gpujob/usecases/sync/ranges.py) and
``rangeserve`` (one process serving every channel of a sync over TCP).
"""

from .durable import durable
from .format import CHUNK, MAGIC, Compressed, Item, TransferError, frame
from .guard import Guard, check_name, safe_target
from .hashing import HashCache, Hasher, file_hash, small_hash
from .parts import drop_part, is_tmp_name, matching_prefix, part_chunks, part_path, sidecar_path
from .receive import delete_paths, read_items
from .send import write_items
from .tree import RACY_NS, drop_racy, fill_hashes, find_listing, find_ns, find_stamp, racy, tree, tree_digest

__all__ = [
    "CHUNK", "MAGIC", "RACY_NS", "Compressed", "Guard", "HashCache", "Hasher", "Item", "TransferError", "check_name",
    "delete_paths", "drop_part", "drop_racy", "durable", "file_hash", "fill_hashes", "find_listing", "find_ns",
    "find_stamp", "frame", "is_tmp_name", "matching_prefix", "part_chunks", "part_path", "racy", "read_items",
    "safe_target", "sidecar_path", "small_hash", "tree", "tree_digest", "write_items",
]
