"""The instance's job index (``<root>/jobs.index``): listing jobs costs what the listing shows,
not the number of old jobs.

One JSON line per event, appended (a line is far below PIPE_BUF, so concurrent appends do not
interleave): ``{"id", "t", "name"}`` when a job is submitted, ``{"id", "done": true}`` once a
reader saw it in a final state other than ``lost`` (a lost job is still to be announced and
may be resumed), ``{"id", "done": false}`` when it is resumed. Job folders the
index does not know (made before it existed) are added from their status.json on the next read;
folders removed by hand drop out.
"""

import json
import os
from typing import Dict, List, Set, Tuple

from remote.core.layout import Root
from remote.core.protocol import SETTLED

RECENT = 30  # finished jobs a plain listing shows, newest first; running and queued ones always


def _path(root: Root) -> str:
    return str(root.root / "jobs.index")


def _append(root: Root, recs: List[Dict[str, object]]) -> None:
    if not recs:
        return
    data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in recs).encode()
    fd = os.open(_path(root), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def add(root: Root, job_id: str, name: str, submitted_at: float) -> None:
    _append(root, [{"id": job_id, "t": submitted_at, "name": name}])


def mark(root: Root, job_ids: List[str], done: bool) -> None:
    _append(root, [{"id": i, "done": done} for i in job_ids])


def read(root: Root) -> Tuple[List[str], Dict[str, str], Set[str]]:
    """(job ids in submit order, their names, the ids known finished)."""
    times = {}  # type: Dict[str, float]
    names = {}  # type: Dict[str, str]
    done = set()  # type: Set[str]
    try:
        with open(_path(root), "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            r = json.loads(line.decode("utf-8"))
            i = r["id"]
            t = float(r["t"] or 0) if "t" in r else None
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, OverflowError):
            continue  # a torn last line of a crashed writer, or a line no writer of ours made
        if not isinstance(i, str):
            continue  # only names of folders under jobs/ are listed (ids & present, below)
        if t is not None:  # a (re)submit: a job moved away and back here runs again
            times[i] = t
            names[i] = str(r.get("name") or "")
            done.discard(i)
        elif r.get("done") is True:
            done.add(i)
        elif r.get("done") is False:
            done.discard(i)
    try:
        present = set(os.listdir(str(root.jobs)))
    except OSError:
        present = set()
    missing = [i for i in present - set(times) if os.path.isfile(str(root.jobs / i / "status.json"))]
    if missing:  # folders from before the index, or a submit that died before its line
        new = []  # type: List[Dict[str, object]]
        for i in missing:
            st = root.job(i).record()
            times[i], names[i] = float(st.submitted_at or 0), str(st.name or "")
            new.append({"id": i, "t": times[i], "name": names[i]})
            if st.state in SETTLED:
                done.add(i)
                new.append({"id": i, "done": True})
        try:
            _append(root, new)
        except OSError:  # a read-only or full disk: listing still works
            pass
    ids = sorted((i for i in times if i in present), key=lambda i: (times[i], i))
    return ids, names, done


def listing(root: Root, everything: bool = False, recent: int = RECENT) -> Tuple[List[str], int, Set[str]]:
    """(ids to show in submit order, how many older finished ones are left out, ids known
    finished): every job not known finished plus the ``recent`` newest; all with ``everything``."""
    ids, _, done = read(root)
    if everything:
        return ids, 0, done
    newest = set(ids[-recent:]) if recent > 0 else set()
    shown = [i for i in ids if i in newest or i not in done]
    return shown, len(ids) - len(shown), done
