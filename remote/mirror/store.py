"""A job's checkpoints on a mirror: ``<dest>/<name>`` and, written last, ``<dest>/.complete/<name>.json``.

A checkpoint without its marker is not one: a torn upload (the instance died mid-copy) is never
listed, so never restored. The marker holds what restoring needs (name, step, kind, files).
"""

import json
import time
from typing import Any, Dict, List, Optional
from urllib.parse import quote, unquote

from remote.mirror.engine import MirrorError, Rclone

MARKERS = ".complete"


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


def write_marker(rc: Rclone, dest: str, doc: Dict[str, Any]) -> None:
    data = (json.dumps(dict(doc, mirrored_at=time.time()), sort_keys=True) + "\n").encode()
    rc.run(["rcat", marker_path(dest, doc["name"])], data=data, timeout=120)


def remove(rc: Rclone, dest: str, doc: Dict[str, Any]) -> None:
    """The marker first (the checkpoint stops counting), then its files."""
    rc.run(["deletefile", marker_path(dest, doc["name"])], timeout=120)
    path = "{}/{}".format(dest, doc["name"])
    rc.run(["purge" if doc.get("is_dir", True) else "deletefile", path], timeout=600)


def newest(rc: Rclone, dest: str) -> Optional[Dict[str, Any]]:
    done = listing(rc, dest)
    return done[-1] if done else None
