"""What the laptop accepts from an agent: size, depth and shape per verb, and how long it waits.

The instance is someone else's machine: with the agent replaced by a hostile program, a reply
with no size limit took the laptop past 1 GB in 4 s, deeply nested JSON raised an uncaught
RecursionError, a wrong-shaped ``ls`` reply a TypeError, and a reply that never came waited
out a 600 s timeout. Every reply is now read up to its verb's limit, parsed with a depth limit
and checked for the shape its readers index into; anything else is ``UnreadableReply`` (exit 3).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from gpujob.bundle import import_remote
from gpujob.errors import ConnectError

MiB = 1 << 20
DEFAULT_LIMIT = 16 * MiB
# bytes of one reply; a tree's manifest is the large one (a 100,000-file project is ~20 MB)
LIMITS = {"status": 16 * MiB, "watch": 16 * MiB, "manifest": 128 * MiB, "sync": 128 * MiB, "send": 128 * MiB,
          "hello": MiB, "gpus": MiB, "port": MiB, "unlease": MiB, "pulled": MiB, "moved": MiB, "resume": MiB,
          "stop": MiB, "submit": 4 * MiB, "agentlog": 16 * MiB, "authkeys": MiB,
          "bench": 256 << 10}  # the preflight: a few KiB, kept in the profile (stored_ok)
# seconds a verb may take when its caller names no timeout: quick reads in seconds, not 600
# (a verb that may wait on a job's lock, such as resume or stop, keeps the long one)
TIMEOUTS = {"status": 30.0, "watch": 30.0, "hello": 20.0, "gpus": 60.0, "port": 30.0, "tb": 60.0, "agentlog": 60.0,
            "pulled": 60.0, "unlease": 30.0, "authkeys": 60.0}
DEFAULT_TIMEOUT = 600.0
MAX_DEPTH = 64
SERVE_OVERHEAD = 2  # the kept agent wraps a reply in a JSON string: escaping at most doubles ASCII text


class UnreadableReply(ConnectError):
    """The agent's answer is too large, too deep or of the wrong shape (exit 3, like a broken link:
    the host, not the user, is at fault)."""


def limit(verb: str) -> int:
    return LIMITS.get(verb, DEFAULT_LIMIT)


def timeout(verb: str) -> float:
    """The verb's timeout; ``GPUJOB_TIMEOUT_<VERB>`` (seconds) changes it (a slow instance, a test)."""
    import os

    env = os.environ.get(f"GPUJOB_TIMEOUT_{verb.upper()}")
    try:
        return float(env) if env else TIMEOUTS.get(verb, DEFAULT_TIMEOUT)
    except ValueError:
        return TIMEOUTS.get(verb, DEFAULT_TIMEOUT)


def unreadable(host: str, what: str) -> UnreadableReply:
    return UnreadableReply(f"the agent on {host} answered something gpujob cannot read: {what}",
                           f"run gpujob doctor {host}; if it keeps happening, the instance may not be "
                           "running gpujob's agent (reinstall: rm -rf ROOT/agent there)")


def too_large(host: str, n: int) -> UnreadableReply:
    return unreadable(host, f"a reply of more than {n / MiB:.0f} MiB")


_KEEP = b'[]{}"'
_DROP = bytes(c for c in range(256) if c not in _KEEP)


def depth_ok(text: str, max_depth: int = MAX_DEPTH) -> bool:
    """Whether ``text``'s brackets nest at most ``max_depth`` deep, in C-speed passes (no Python
    loop over characters, no recursion): escaped quotes and backslashes out, then all but brackets
    and quotes, then what lies between quotes (strings), then innermost pairs, once per level."""
    b = text.encode("utf-8", "surrogatepass").replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _DROP)
    b = b"".join(b.split(b'"')[::2])
    for _ in range(max_depth):
        if not b:
            return True
        n = len(b)
        b = b.replace(b"[]", b"").replace(b"{}", b"")  # a level or two a pass: never more than twice the limit
        if len(b) == n:
            return True  # unbalanced: json.loads says what is wrong
    return not b


# the fields the drawings index into, of the status document declared once (remote/view/statusdoc.py)
_DOC = import_remote("view.statusdoc")


def _kinds(fields: tuple[Any, ...]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """``fields``' (objects, strings, numbers): an integer is a number here too (checked, bounded)."""
    numbers = tuple(f.name for f in fields if f.kind in (_DOC.INTEGER, _DOC.NUMBER))
    return _DOC.named(_DOC.OBJECT, fields), _DOC.named(_DOC.TEXT, fields), numbers


# times and counts the drawings do arithmetic on: a NaN, an Infinity or a 4,000-digit integer
# in one was an internal error in ls and cost (int(inf), SQLite's 64-bit column)
_OBJECTS, _STRINGS, _NUMBERS = _kinds(_DOC.FIELDS)
_BILLING = _kinds(_DOC.BILLING)
_WATCH = _kinds(_DOC.WATCH)
_PROGRESS = _kinds(_DOC.PROGRESS)
BOUND = 1e15  # past any epoch second, count or price a host honestly reports (and within a float's exact integers)


def figure(v: Any) -> bool:
    """A number the laptop may compute with: not a bool, finite, of at most ``BOUND``."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and -BOUND <= v <= BOUND  # False for NaN


def _fields(doc: dict, objects: tuple[str, ...], strings: tuple[str, ...], numbers: tuple[str, ...],
            prefix: str = "") -> str | None:
    """What is wrong with ``doc``'s fields, or None; a number that is no ``figure`` is dropped from
    ``doc`` (shown as unknown): a job's own log can make one (a bar's rate of 1e-300 steps/s gives
    an ETA past any bound), and one job's figure must not make the host's whole listing unreadable."""
    for key in strings:
        if doc.get(key) is not None and not isinstance(doc[key], str):
            return f"'{prefix}{key}' is not a string"
    for key in objects:
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            return f"'{prefix}{key}' is not an object"
    for key in numbers:
        v = doc.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            return f"'{prefix}{key}' is not a number"
        if v is not None and not figure(v):
            doc[key] = None
    return None


def _step_of(metrics: Any) -> None:
    """A metrics record's ``step`` the drawings compute with: one a job printed as 1e400 or with
    400 digits is dropped (its other values, NaN included, are shown as they are)."""
    if isinstance(metrics, dict) and isinstance(metrics.get("step"), (int, float)) and not figure(metrics["step"]):
        metrics["step"] = None


def _job(doc: dict) -> str | None:
    """A job record (``status`` lists them, ``watch`` holds one): the fields the drawings index into."""
    wrong = _fields(doc, _OBJECTS, _STRINGS, _NUMBERS)
    if wrong:
        return wrong
    for key in ("last_metrics", "latest_metrics"):
        _step_of(doc.get(key))
    wrong = _series(doc) or _fields(doc.get("spec") or {}, (), (), ("price_per_hour",), "spec.")
    if wrong:
        return wrong
    bill = doc.get("billing") or {}
    wrong = _fields(bill, *_BILLING, "billing.")
    if wrong:
        return wrong
    if doc.get("checkpoints") is not None and not (isinstance(doc["checkpoints"], list)
                                                   and all(isinstance(c, dict) for c in doc["checkpoints"])):
        return "'checkpoints' is not a list of objects"
    return None


def _watch(doc: dict) -> str | None:
    """``watch`` (``status JOB``, a dashboard's job page): the job's record and the figures beside it."""
    if doc.get("job") is not None:
        if not isinstance(doc["job"], dict) or not isinstance(doc["job"].get("job_id"), str):
            return "'job' is not a job record with its 'job_id'"
        wrong = _job(doc["job"])
        if wrong:
            return wrong
    wrong = _fields(doc, *_WATCH) or _fields(doc.get("progress") or {}, *_PROGRESS, "progress.")
    if wrong:
        return wrong
    _step_of(doc.get("latest"))
    gpu = doc.get("gpu") or {}
    if not all(isinstance(gpu.get(k) or [], list) and all(isinstance(g, dict) for g in gpu.get(k) or [])
               for k in ("now", "avg")):
        return "'gpu' is not lists of GPU samples"
    return _series(doc)


def _series(doc: dict) -> str | None:
    series = doc.get("series") or {}
    if not all(isinstance(v, list) and all(isinstance(p, list) for p in v) for v in series.values()):
        return "'series' is not a map of point lists"
    return None


def _jobs(doc: dict) -> str | None:
    jobs = doc.get("jobs")
    if not isinstance(jobs, list) or not all(isinstance(j, dict) for j in jobs):
        return "'jobs' is not a list of job records"
    for j in jobs:
        wrong = _job(j) or (None if isinstance(j.get("job_id"), str) else "a job record without its 'job_id'")
        if wrong:
            return f"job {str(j.get('job_id'))[:40]!r}: {wrong}"
    return _fields(doc, (), (), ("now", "older"))


def plain_name(name: Any) -> bool:
    """A host-supplied name the laptop may use as one path component (a pull's ``DEST/<job_id>``)
    or show as it is: no separator, not ``.``/``..``/hidden, no control character, at most 200 long."""
    return (isinstance(name, str) and 0 < len(name) <= 200 and name.isprintable() and "/" not in name
            and "\\" not in name and not name.startswith("."))


def _manifest(doc: dict) -> str | None:
    """``send --manifest`` (a pull's, a move's): its job id names a folder here, its files are planned from."""
    if not plain_name(doc.get("job_id")):
        return f"a job id that is no plain name ({str(doc.get('job_id'))[:80]!r})"
    files = doc.get("files", {})
    if not isinstance(files, dict) or not all(
            isinstance(v, list) and len(v) >= 4 and all(isinstance(x, int) and not isinstance(x, bool) for x in v[:3])
            and (v[3] is None or isinstance(v[3], str)) for v in files.values()):
        return "'files' is not a map of [size, mtime, mode, link] lists"
    dirs = doc.get("dirs", [])
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        return "'dirs' is not a list of names"
    writing = doc.get("writing") or {}
    if not isinstance(writing, dict) or not all(isinstance(p, list) and all(isinstance(x, int) for x in p)
                                                for p in writing.values()):
        return "'writing' is not a map of pid lists"
    return None


def _held(have: Any) -> bool:
    """{range: [chunk hash, ...]}: what an instance holds of a file's ranges."""
    return isinstance(have, dict) and all(isinstance(v, list) and all(isinstance(h, str) for h in v)
                                          for v in have.values())


def _range(doc: dict) -> str | None:
    """A ``range`` channel's first line: the chunks held of its ranges."""
    return None if _held(doc.get("have", {})) else "'have' is not a map of held chunks"


def _range_serve(doc: dict) -> str | None:
    """A large upload's ``range_serve``: where to connect, with what, and what each file holds."""
    if not (isinstance(doc.get("port"), int) and 0 < doc["port"] < 65536):
        return "'port' is not a port"
    if not isinstance(doc.get("token"), str):
        return "'token' is not a string"
    have = doc.get("have", {})
    if not isinstance(have, dict) or not all(_held(v) for v in have.values()):
        return "'have' is not a map of held chunks"
    return None


def _tb(doc: dict) -> str | None:
    """``tb`` (a tunnel's TensorBoard, or its stop): the port it forwards to, the texts it shows."""
    if doc.get("port") is not None and not (isinstance(doc["port"], int) and not isinstance(doc["port"], bool)
                                            and 0 < doc["port"] < 65536):
        return "'port' is not a port"
    for key in ("job_id", "autodl_url", "note"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            return f"{key!r} is not a string"
    if doc.get("served") is not None and not (isinstance(doc["served"], list)
                                              and all(isinstance(n, str) for n in doc["served"])):
        return "'served' is not a list of folder names"
    for key in ("port_taken", "via"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            return f"{key!r} is not an object"
    via = doc.get("via") or {}
    if via and not (isinstance(via.get("path"), str) and isinstance(via.get("kind"), str)):
        return "'via' lacks its path and kind"
    return None


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _tree(t: Any) -> bool:
    """One tree of a sync manifest: {"files": {rel: [size, mtime_ns, mode, link, hash]}, "dirs", "parts"}."""
    if not isinstance(t, dict):
        return False
    files, dirs, parts = t.get("files", {}), t.get("dirs", []), t.get("parts", {})
    return (isinstance(files, dict) and all(
        isinstance(v, list) and len(v) >= 5 and _num(v[0]) and isinstance(v[2], int)
        and (v[3] is None or isinstance(v[3], str)) and (v[4] is None or isinstance(v[4], str)) for v in files.values())
        and isinstance(dirs, list) and all(isinstance(d, str) for d in dirs)
        and isinstance(parts, dict) and all(isinstance(v, list) for v in parts.values()))


def check_manifest(host: str, doc: dict, trees: list[str]) -> None:
    """A sync's manifest holds each tree asked for, in the shape the plan reads; else ``UnreadableReply``."""
    for name in trees:
        if not _tree(doc.get(name)):
            raise unreadable(host, f"no manifest of {name!r} in the shape gpujob reads")
    if doc.get("free_bytes") is not None and not _num(doc["free_bytes"]):
        raise unreadable(host, "'free_bytes' is not a number in its manifest")


def _sync_manifest(doc: dict) -> str | None:
    """``manifest``/``sync``: what is read before the trees (``check_manifest``, which knows their names)."""
    if "busy" in doc and not _num(doc["busy"]):  # another submit's lease: the seconds it may still hold it
        return "'busy' is not a number"
    if doc.get("free_bytes") is not None and not _num(doc["free_bytes"]):
        return "'free_bytes' is not a number"
    return None


def _submitted(doc: dict) -> str | None:
    """``submit``: the new job's id is recorded in the laptop's index and named in every next command."""
    return None if plain_name(doc.get("job_id")) else f"a job id that is no plain name ({str(doc.get('job_id'))[:80]!r})"


def _removed(doc: dict) -> str | None:
    """``rm``: the job it removed (the laptop's index forgets it) and what that freed."""
    if not isinstance(doc.get("job_id"), str):
        return "'job_id' is not a string"
    if doc.get("bytes") is not None and not _num(doc["bytes"]):
        return "'bytes' is not a number"
    return None


def _collected(doc: dict) -> str | None:
    """``gc``: what it removed or would (the laptop's index forgets those jobs)."""
    items = doc.get("items")
    if not isinstance(items, list) or not all(
            isinstance(i, dict) and isinstance(i.get("kind"), str) and _num(i.get("bytes"))
            and isinstance(i.get("job_id") or i.get("path"), str) for i in items):
        return "'items' is not a list of {kind, bytes, job_id or path}"
    if not _num(doc.get("bytes")) or not isinstance(doc.get("busy", []), list):
        return "'bytes' or 'busy' is not what it should be"
    return None


def _authkeys(doc: dict) -> str | None:
    """``authkeys`` (host rekey): the file a key went into, the lines removed per file."""
    removed = doc.get("removed", {})
    if not (doc.get("added") is None or isinstance(doc["added"], str)) or not isinstance(removed, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in removed.items()) \
            or not isinstance(doc.get("held_back", False), bool):
        return "'added', 'removed' or 'held_back' is not what it should be"
    return None


def _ended(doc: dict) -> str | None:
    """``stop`` and ``resume``: the job's record, and the processes a stop could not end (which decide
    its exit code: a reply with none listed must not read as stopped for certain)."""
    if not isinstance(doc.get("job_id"), str):
        return "a job record without its 'job_id'"
    survivors = doc.get("survivors", [])
    if not isinstance(survivors, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in survivors):
        return "'survivors' is not a list of pids"
    return _job(doc)


def _gpus(doc: dict) -> str | None:
    """``gpus`` (placement before a submit): the host's cards (None: a CPU host) and who holds which."""
    gpus, held = doc.get("gpus"), doc.get("held")
    if gpus is not None and not (isinstance(gpus, list) and all(
            isinstance(g, dict) and (g.get("mem_used") is None or figure(g["mem_used"])) for g in gpus)):
        return "'gpus' is not a list of GPUs"
    if held is not None and not isinstance(held, dict):
        return "'held' is not an object"
    if doc.get("queue") is not None and not isinstance(doc["queue"], list):
        return "'queue' is not a list"
    return None


def _agentlog(doc: dict) -> str | None:
    """``agentlog`` (``gpujob agent-log``): the lines it prints, and where they came from."""
    lines = doc.get("lines")
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines) or not isinstance(doc.get("path"), str):
        return "'lines' is not a list of lines with their 'path'"
    return None


_BENCH_GPU_NUMBERS = ("index", "bf16_tflops", "fp16_tflops", "mem_gbs", "h2d_gbs", "bf16_pct", "fp16_pct", "mem_pct")
_BENCH_DISK_NUMBERS = ("write_mbs", "read_mbs", "free_inodes")


def _strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _bench(doc: dict) -> str | None:
    """``bench`` (the preflight, kept in the host profile and drawn by ``host ls``, ``doctor --bench``,
    every submit): when, its warnings and skips as text, a list of GPUs with figures, the disk's figures."""
    wrong = _fields(doc, ("versions", "disk", "xid"), (), ("at", "seconds"))
    if wrong:
        return wrong
    for key in ("warnings", "skipped"):
        if doc.get(key) is not None and not _strings(doc[key]):
            return f"'{key}' is not a list of strings"
    gpus = doc.get("gpus")
    if gpus is not None and not (isinstance(gpus, list) and all(isinstance(g, dict) for g in gpus)):
        return "'gpus' is not a list of GPUs"
    for g in gpus or []:
        wrong = _fields(g, ("rated", "health"), ("name", "error"), _BENCH_GPU_NUMBERS, "gpus[].")
        if wrong:
            return wrong
    versions = doc.get("versions") or {}
    if not all(v is None or isinstance(v, str) for v in versions.values()):
        return "'versions' is not an object of strings"
    return _fields(doc.get("disk") or {}, (), ("path", "error"), _BENCH_DISK_NUMBERS, "disk.")


def stored_ok(verb: str, doc: Any) -> str | None:
    """What is wrong with ``doc``, a verb's reply kept on this machine (a profile's ``bench``), or None:
    the same shape check and size bound as when it arrived, for a value written by an older gpujob,
    by hand, or before the check existed (a stored value is read by commands that ask no host)."""
    if not isinstance(doc, dict):
        return f"a {type(doc).__name__} where a {verb!r} reply is a JSON object"
    try:
        size = len(json.dumps(doc))
    except (TypeError, ValueError):  # a value YAML can hold and JSON cannot (a date)
        return "a value that is no JSON"
    if size > limit(verb):
        return f"more than {limit(verb) >> 10} KiB"
    if not depth_ok(json.dumps(doc)):
        return f"JSON nested more than {MAX_DEPTH} deep"
    check = SHAPES.get(verb)
    return check(doc) if check else None


# the fields each verb's readers index into; a verb not named here must answer a JSON object
SHAPES: dict[str, Callable[[dict], str | None]] = {"status": _jobs, "watch": _watch, "send": _manifest,
                                                   "range_serve": _range_serve, "range": _range, "tb": _tb,
                                                   "rm": _removed, "gc": _collected, "submit": _submitted,
                                                   "authkeys": _authkeys, "manifest": _sync_manifest,
                                                   "sync": _sync_manifest, "agentlog": _agentlog, "stop": _ended,
                                                   "resume": _ended, "gpus": _gpus, "bench": _bench}


def parse(verb: str, host: str, text: str) -> Any:
    """The reply's last line as a JSON object of the verb's shape; ``UnreadableReply`` otherwise.
    None when the line is not JSON at all (the caller reports the command's failure)."""
    line = text.strip().rpartition("\n")[2]
    if not line:
        return None
    if not depth_ok(line):
        raise unreadable(host, f"JSON nested more than {MAX_DEPTH} deep in its {verb!r} reply")
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    except RecursionError:  # pragma: no cover - depth_ok caught it first
        raise unreadable(host, f"JSON nested too deep in its {verb!r} reply") from None
    if not isinstance(doc, dict):
        raise unreadable(host, f"a {type(doc).__name__} where its {verb!r} reply is a JSON object")
    if "error" in doc:
        return doc
    check = SHAPES.get(verb)
    wrong = check(doc) if check else None
    if wrong:
        raise unreadable(host, f"{wrong} in its {verb!r} reply")
    return doc
