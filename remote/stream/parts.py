"""Temporary names, part files and their sidecars.

A file is received under a short temporary name in its folder (``.gpujob-<24 hex digits of
the name's hash>.part``: it fits NAME_MAX whatever the name's length). The part file of a large
file keeps its verified prefix; the sidecar ``.gpujob-<hash>.json`` beside it names the final
file and the prefix's chunk hashes, so a cut transfer resumes where it stopped.
"""

import json
import os
from pathlib import Path
from typing import Any, List

from .durable import NOFOLLOW
from .format import CHUNK
from .hashing import file_hash, sha256_of

TMP_PREFIX = ".gpujob-"  # temporary names: TMP_PREFIX + a hash of the final name + a suffix
PART = ".part"  # a file being received (small ones for a moment, a large one until verified)
SIDECAR = ".json"  # beside a large file's part file: its final name and verified chunk hashes
LEGACY_PART = ".gpujob-part"  # the suffix older agents appended to the final name
RANGE = ".r"  # + a range's index + SIDECAR: the sidecar of one byte range of a part file (ranges.py)


SIDECAR_EVERY = 4  # chunks between sidecar writes


def tmp_stem(leaf: str) -> str:
    """The temporary name's stem for final name ``leaf``, in the same folder: short and fixed
    (``.gpujob-`` + 24 hex digits), so it fits NAME_MAX whatever the final name's length and a
    cut transfer finds its part file again."""
    return TMP_PREFIX + sha256_of(leaf.encode("utf-8", "surrogateescape")).hexdigest()[:24]


def is_tmp_name(name: str) -> bool:
    """A temporary name of ours (or an older agent's): never listed, never sent."""
    if name.endswith(LEGACY_PART) or name.endswith(LEGACY_PART + ".json") or name.endswith(LEGACY_PART + ".json.tmp"):
        return True
    if not name.startswith(TMP_PREFIX) or len(name) < len(TMP_PREFIX) + 24:
        return False
    tail = name[len(TMP_PREFIX) + 24:]
    if tail in (PART, SIDECAR, SIDECAR + ".tmp", PART + ".x"):
        return True
    k, _, rest = tail[len(RANGE):].partition(".")
    return tail.startswith(RANGE) and k.isdigit() and "." + rest in (SIDECAR, SIDECAR + ".tmp")


def part_path(target: Any) -> str:
    """Where ``target`` (a path) is received before it is renamed into place."""
    d, _, leaf = str(target).rpartition("/")
    return d + "/" + tmp_stem(leaf) + PART


def sidecar_path(target: Any) -> str:
    d, _, leaf = str(target).rpartition("/")
    return d + "/" + tmp_stem(leaf) + SIDECAR


def part_chunks(target: Path) -> List[str]:
    """The verified chunk hashes of ``target``'s part file (empty when there is none)."""
    try:
        with open(sidecar_path(target)) as f:
            doc = json.load(f)
        chunks = list(doc.get("chunks", []))
        if doc.get("name", Path(target).name) == Path(target).name and \
                os.path.getsize(part_path(target)) >= len(chunks) * CHUNK:
            return chunks
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    return []


def save_sidecar(target: Path, chunks: List[str]) -> None:
    side = sidecar_path(target)
    tmp = side + ".tmp"
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, 0o644), "w") as f:  # never through a link
        json.dump({"name": Path(target).name, "chunks": chunks, "chunk": CHUNK}, f)
    os.replace(tmp, side)


def range_sidecar(target: Any, k: int) -> str:
    """The sidecar of range ``k`` of ``target``'s part file (remote/stream/ranges.py)."""
    d, _, leaf = str(target).rpartition("/")
    return d + "/" + tmp_stem(leaf) + RANGE + str(k) + SIDECAR


def range_sidecars(target: Any) -> List[str]:
    """Every range sidecar beside ``target``'s part file."""
    d, _, leaf = str(target).rpartition("/")
    stem = tmp_stem(leaf) + RANGE
    try:
        names = os.listdir(d or "/")
    except OSError:
        return []
    return [d + "/" + n for n in names if n.startswith(stem) and is_tmp_name(n)]


def drop_part(target: Path) -> None:
    """Remove ``target``'s part file and every sidecar describing it (a single stream's and the
    ranges'): bytes written by one path must never be vouched for by the other's sidecar."""
    for p in [part_path(target), sidecar_path(target)] + range_sidecars(target):
        try:
            os.unlink(p)
        except OSError:
            pass


def matching_prefix(path: Path, remote_chunks: List[str], size: int) -> List[str]:
    """The leading chunks of ``remote_chunks`` that match the local file (whole chunks only)."""
    if not remote_chunks:
        return []
    n = min(len(remote_chunks), size // CHUNK)
    local = file_hash(path, n * CHUNK).chunks
    same = []  # type: List[str]
    for a, b in zip(local, remote_chunks):
        if a != b:
            break
        same.append(a)
    return same
