"""A job's checkpoints on a mirror: ``<dest>/<path>`` and, written last, ``<dest>/.complete/<name>.json``.

A checkpoint without its marker is not one: a torn upload (the instance died mid-copy) is never
listed, so never restored. The marker holds what restoring needs (name, step, kind, ``path``) and
which version it is (``files``: each file's size and SHA-256, ``version``, the source's ``stamp``:
``remote.mirror.version``). A checkpoint saved again under its name goes to the other of two slots,
``<name>`` and ``.versions/<name>``, while the marker still names the first: the earlier version
stays whole until the new one is verified and its marker written (one object, so one atomic switch);
only then is the earlier slot deleted. A marker written before versions has no ``path``: ``<name>``.
"""

import json
import time
from typing import Any, Dict, List, Mapping, Optional
from urllib.parse import quote, unquote

from remote.mirror.engine import MirrorError, Rclone

MARKERS = ".complete"
VERSIONS = ".versions"


def marker_path(dest: str, name: str) -> str:
    return "{}/{}/{}.json".format(dest, MARKERS, quote(name, safe=""))


def listing(rc: Rclone, dest: str) -> List[Dict[str, Any]]:
    """The mirrored complete checkpoints, oldest first (by step, then by when mirrored)."""
    try:
        out = rc.run(["lsf", "--files-only", "{}/{}".format(dest, MARKERS)], timeout=120)
    except MirrorError as e:
        if "directory not found" in str(e).lower() or "not found" in str(e).lower():
            return []
        raise
    found = []
    for line in out.splitlines():
        if not line.endswith(".json"):
            continue
        name = unquote(line[:-5])
        found.append({"name": name})
    if not found:
        return []
    docs = read_markers(rc, dest, [f["name"] for f in found])
    return sorted(docs, key=lambda d: (d.get("step") is None, d.get("step") or 0, d.get("mirrored_at") or 0))


def read_markers(rc: Rclone, dest: str, names: List[str]) -> List[Dict[str, Any]]:
    """The markers' documents (one ``rclone cat`` of the folder, markers separated by newlines)."""
    out = rc.run(["cat", "{}/{}".format(dest, MARKERS), "--include", "*.json"], timeout=120)
    docs = []
    for line in out.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and d.get("name") in names:
            docs.append(d)
    return docs


def path_of(doc: Mapping[str, object]) -> str:
    """Where a marker's checkpoint lies, relative to the job's folder on the mirror."""
    path = doc.get("path")
    name = str(doc["name"])  # a marker's name is text (write_marker's callers)
    return path if isinstance(path, str) and path in slots(name) else name


def slots(name: str) -> List[str]:
    return [name, "{}/{}".format(VERSIONS, name)]


def slot_for(name: str, was: Optional[Mapping[str, object]], version: str) -> str:
    """Where a version of ``name`` is uploaded: where it already lies when the marker names this
    very version (or none: a marker from before versions, whose files a hash-compared copy mostly
    keeps); else the slot the marker does not name (never over the verified one)."""
    if was is None:
        return name
    if was.get("version") in (None, version):
        return path_of(was)
    return [s for s in slots(name) if s != path_of(was)][0]


def write_marker(rc: Rclone, dest: str, doc: Mapping[str, object]) -> None:
    data = (json.dumps(dict(doc, mirrored_at=time.time()), sort_keys=True) + "\n").encode()
    rc.run(["rcat", marker_path(dest, str(doc["name"]))], data=data, timeout=120)


def remove(rc: Rclone, dest: str, doc: Mapping[str, object]) -> None:
    """The marker first (the checkpoint stops counting), then its files in both slots."""
    name = str(doc["name"])  # text, and ``is_dir`` a flag, as write_marker's callers give them
    rc.run(["deletefile", marker_path(dest, name)], timeout=120)
    for slot in slots(name):
        drop(rc, dest, slot, bool(doc.get("is_dir", True)))


def drop(rc: Rclone, dest: str, slot: str, is_dir: bool) -> None:
    """A slot's files (nothing there: nothing to do)."""
    try:
        rc.run(["purge" if is_dir else "deletefile", "{}/{}".format(dest, slot)], timeout=600)
    except MirrorError as e:
        if "not found" not in str(e).lower():
            raise


def newest(rc: Rclone, dest: str) -> Optional[Dict[str, Any]]:
    done = listing(rc, dest)
    return done[-1] if done else None
