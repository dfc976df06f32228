"""Where a job's metrics come from: its metrics file, else TensorBoard events, else its log.

Precedence: ``GPUJOB_METRICS_FILE`` (``metrics.jsonl``, what the runtime helper or the script
writes) > TensorBoard event files > what the log prints. While the job runs, the supervisor's
``Collector`` reads the event files and ``output.log`` incrementally (byte offsets kept in
``metrics.state.json``) and appends what it finds, in the metrics file's own format
(``{"t", "step", key: value}`` per line), to ``metrics.tb.jsonl`` and ``metrics.log.jsonl``.
Every reader (status, plot, notifications, cost) then takes the first of the three files that
has a record (status: a record of the current attempt, if one has: ``active(job, since)``).

Event files are looked for under the job's TensorBoard folder (``GPUJOB_TB_DIR`` or
``tensorboard.logdir``), then, in a bounded walk, under the job's code folder and
``<job>/ckpt/runs`` (where scripts' own writers put them by default: torch's and HF's
``runs/<date>_<host>/``, Lightning's ``lightning_logs/version_N/``). Files created before the job
was submitted (a ``runs/`` folder synced from the laptop) are not this job's and are skipped. Each
attempt's writer makes a new file (a new ``runs/<date>_<host>/``): the search runs every second of
an attempt's first minute until a file of that attempt is found.

The log also gives progress (step, total, steps/s from tqdm) even when the metrics come from
elsewhere: ``progress(job)``; and the run's total, as any source last stated it (a record's
``max_steps``, ``step N/200``, a bar's total), stays known across sources and attempts: ``known_total(job)``.
"""

import json
import os
import struct
import time
from pathlib import Path
from typing import Any, List, Optional, Tuple

from remote.core import atomicfile
from remote.core.jsontypes import JSONObject
from remote.core.layout import JobDir, last_json_line, read_json, tail_lines
from remote.core.spec import JobSpec, SpecLike
from remote.metrics.metricrecord import MetricRecord, Progress
from remote.metrics.recordline import record_line
from remote.metrics.totals import run_hints

# the readers (tfevents, logparse) are imported by the Collector only: every agent verb reads
# sources through active()/progress(), and a verb's start should not pay for their tables and regexes

SOURCES = (("file", "metrics.jsonl"), ("tensorboard", "metrics.tb.jsonl"), ("log", "metrics.log.jsonl"))
STATE = "metrics.state.json"
EVERY = float(os.environ.get("GPUJOB_METRICS_EVERY", "2"))  # seconds between two reads
SCAN_EVERY = (5.0, 30.0)  # seconds between two searches for new event files: before the first is found, after
SCAN_NEW_ATTEMPT = (1.0, 60.0)  # an attempt's first 60 s, until a file of its own is found: a search every second
MAX_WALK = 3000  # folders a search visits at most
WALK_DEPTH = 4
SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "wandb", "data", "datasets", "ckpt", "checkpoints"}
EVENTS = "events.out.tfevents."


READ_CHUNK = 4 << 20  # log bytes read and parsed at once
READS_A_TICK = 2  # chunks a collect reads at most: 4 MiB/s, past a flood of wide lines (2.5 MB/s); a larger
# backlog (a resumed supervisor's) is caught up over ticks, the supervisor's loop never held long


def path_of(job: JobDir, source: str) -> Path:
    return job.path / dict(SOURCES)[source]


def active(job: JobDir, since: float = 0.0) -> Tuple[Optional[str], Path]:
    """(source name, its file): the first source with a record; (None, metrics.jsonl) when none has.

    ``since``: the current attempt's start (a restart): the first source whose newest record is of
    this attempt, as a first attempt's readers take the log until the event files have a record,
    else the first with any record."""
    found: List[Tuple[str, Path]] = []
    for name, fname in SOURCES:
        p = job.path / fname
        try:
            if p.stat().st_size == 0:
                continue  # made, not yet written
        except OSError:
            continue
        found.append((name, p))
        if not since or _newest_t(p) >= since:
            return found[-1]
    return found[0] if found else (None, job.metrics)


def _newest_t(path: Path) -> float:
    """The time of a metrics file's last record (inf when it says none: a script's own line is current)."""
    rec = last_json_line(path)
    t = rec.get("t") if isinstance(rec, dict) else None
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else float("inf")


def progress(job: JobDir) -> Progress:
    """The log's newest progress: {step, total, rate (steps/s), eta_s, t} (empty when none)."""
    return (read_json(job.path / STATE, {}) or {}).get("progress") or {}


def known_total(job: JobDir) -> Optional[int]:
    """The run's total steps as a source last stated it (a record's ``max_steps``: the log's ``step N/200``,
    the run's hints; a bar's total), whichever source the metrics now come from and in every attempt."""
    total = (read_json(job.path / STATE, {}) or {}).get("total")
    return total if isinstance(total, int) and not isinstance(total, bool) and total > 0 else None


def unread(job: JobDir, spec: SpecLike, limit: int = 1 << 18) -> Tuple[List[MetricRecord], Progress]:
    """(records, progress) of what the log printed since the Collector's last read, parsed now.

    The Collector reads every EVERY seconds; status reads the rest itself so that its step
    agrees with the log's last line. Parsed without the Collector's earlier context (a per-epoch
    counter, a bar's count of passes), so a reader takes a step from here only when it is newer."""
    st = read_json(job.path / STATE, {}) or {}
    off = int(st.get("log_offset") or 0)
    try:
        with open(str(job.log), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size <= off:
                return [], {}
            start = max(off, size - limit)  # a long backlog: its newest lines are what status needs
            f.seek(start)
            data = f.read(size - start)
    except OSError:
        return [], {}
    if start > off:
        data = data[data.find(b"\n") + 1:]  # from a line start
    from remote.metrics.logparse import LogParser  # only now: a caught-up log costs no import (ls)

    parser = LogParser(epochs=run_hints(spec).get("epochs"))
    parser.carried(st.get("parser"))  # the Collector's context: epoch base, where bars were first seen
    recs = parser.feed(data, round(time.time(), 3))
    return recs, dict(parser.progress)


LS_TAIL = 4 << 10  # a listing parses at most this much of each running job's unread log (status: 256 KiB)


def step_value(v: Any) -> float:
    """A record's step as a float to compare; -inf when it is none."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("-inf")


def with_unread(job: JobDir, spec: SpecLike, source: Optional[str], last: JSONObject,
                limit: int = 1 << 18) -> Tuple[JSONObject, Progress, bool]:
    """(last, progress, took): ``last`` (the newest value of each metric) with the records the log
    printed since the Collector's last read, when the log is the metrics source (a metrics file or
    events the script writes are read whole, not lagging), and the progress that tail shows.
    Records are taken only when their step is not older (the tail is parsed without the earlier
    lines' context). ``took``: records from the tail were taken. status and ls share it, so the
    step they show is the log's newest in both."""
    recs, fresh = unread(job, spec, limit)
    if source not in (None, "log"):
        return last, fresh, False
    newest = max((step_value(r.get("step")) for r in recs), default=float("-inf"))
    if newest == float("-inf") or newest < step_value(last.get("step")):
        return last, fresh, False
    last = dict(last)
    for r in recs:
        last.update(r)
    return last, fresh, True


def latest(path: Path, lines: int = 200) -> JSONObject:
    """The newest value of each key over the last ``lines`` records (eval metrics come on lines of their own)."""
    out: JSONObject = {}
    for line in tail_lines(path, lines, 1 << 18):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.update(rec)
    return out


def tb_roots(job: JobDir, spec: SpecLike) -> List[Tuple[Path, int]]:
    """(folder, depth) to search for event files: the job's TensorBoard folder first."""
    tb = JobSpec.of(spec).tensorboard_logdir
    own = (job.code / tb).resolve() if tb else job.tb
    return [(own, 6), (job.code, WALK_DEPTH), (job.path / "ckpt" / "runs", 2)]


def find_event_files(roots: List[Tuple[Path, int]], since: float) -> List[str]:
    """Event files under ``roots`` created at or after ``since`` (bounded: MAX_WALK folders)."""
    found, seen, visited = [], set(), 0  # type: List[str], set, int
    for root, depth in roots:
        stack = [(str(root), 0)]
        while stack and visited < MAX_WALK:
            folder, d = stack.pop()
            visited += 1
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for e in entries:
                if e.name.startswith(EVENTS):
                    real = os.path.realpath(e.path)
                    if real not in seen and _created(e, since):
                        seen.add(real)
                        found.append(e.path)
                elif d < depth and not e.name.startswith(".") and e.name not in SKIP_DIRS:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append((e.path, d + 1))
                    except OSError:
                        pass
    return sorted(found)


def _created(entry: Any, since: float) -> bool:
    """Written for this job: the creation time in its name (``…tfevents.<unix time>.…``) or its mtime."""
    try:
        stamp = float(entry.name[len(EVENTS):].split(".")[0])
    except ValueError:
        stamp = 0.0
    if stamp >= since - 60:
        return True
    try:
        return entry.stat().st_mtime >= since
    except OSError:
        return False


def tb_key(tag: str) -> str:
    """A TensorBoard tag is its metric's name, as written (HF's ``train/loss``, ``eval/loss``): what TensorBoard
    shows, and the prefix the dashboard groups charts by."""
    return tag


def _f32(v: float) -> float:
    """The shortest decimal that reads back as the same float32 (0.1f is 0.10000000149…)."""
    for digits in (6, 7, 8, 9):
        s = float("%.*g" % (digits, v))
        if struct.unpack("<f", struct.pack("<f", s))[0] == v:
            return s
    return v


class Collector:
    """A supervisor watcher: every EVERY seconds, new log bytes and new events become records."""

    def __init__(self, job: JobDir, spec: SpecLike, since: float) -> None:
        from remote.metrics import tfevents
        from remote.metrics.logparse import LogParser

        self.tfevents = tfevents
        spec = JobSpec.of(spec)
        self.job, self.spec, self.since = job, spec, since
        st = read_json(job.path / STATE, {}) or {}
        self.log_offset = int(st.get("log_offset") or 0)
        self.tb = {p: tfevents.FileState(int(v.get("offset") or 0)) for p, v in (st.get("tb") or {}).items()}
        for p, v in (st.get("tb") or {}).items():
            self.tb[p].corrupt = bool(v.get("corrupt"))
        hints = run_hints(spec, job.code)
        self.max_steps = hints.get("max_steps")
        self.parser = LogParser(epochs=hints.get("epochs"), patterns=spec.metrics.get("patterns"))
        self.parser.carried(st.get("parser"))  # a new supervisor (resume) goes on counting alike
        self.progress = dict(st.get("progress") or {})
        self.total = known_total(job)  # as a source last stated it: every attempt's, whatever the source
        self.next_at = 0.0
        self.next_scan = 0.0
        self.attempt_at = 0.0  # the current attempt's start; its own event files found yet
        self.attempt_found = True
        self.cpu = 0.0  # process time spent collecting (the benchmark reads it)

    def new_attempt(self, started_at: float) -> None:
        """An attempt started: its writer makes a new event file, looked for at once and then often."""
        self.attempt_at, self.attempt_found, self.next_scan = started_at, False, 0.0

    def tick(self, sup: Any) -> Optional[str]:
        if time.monotonic() >= self.next_at:
            self.next_at = time.monotonic() + EVERY
            self.collect()
        return None

    def collect(self, final: bool = False) -> None:
        """Read what is new (never raises: a parse problem must not touch the job).

        ``final``: the attempt ended; look for event files now (a short run's only chance)."""
        c0 = time.process_time()
        if final:
            self.next_scan = 0.0
        try:
            t = round(time.time(), 3)
            changed = self._log(t)
            if not self._file_has_records():
                changed = self._events(t) or changed
            if changed:
                self._save()
        except Exception as e:  # pragma: no cover - logged, never fatal
            try:
                self.job.event("metrics_error", error="{}: {}".format(type(e).__name__, e))
            except OSError:
                pass
        self.cpu += time.process_time() - c0

    def _file_has_records(self) -> bool:
        try:
            return self.job.metrics.stat().st_size > 0
        except OSError:
            return False

    def _log(self, t: float) -> bool:
        read = False
        for _ in range(READS_A_TICK):  # a chunk at a time: the memory one chunk takes, however far behind
            data = self._log_chunk()
            if data:
                read = True
                self._parse(data, t)
            if len(data) < READ_CHUNK:
                break
        return read

    def _log_chunk(self) -> bytes:
        try:
            with open(str(self.job.log), "rb") as f:
                f.seek(self.log_offset)
                data = f.read(READ_CHUNK)
        except OSError:
            return b""
        self.log_offset += len(data)
        return data

    def _parse(self, data: bytes, t: float) -> None:
        recs = self.parser.feed(data, t)
        if self.max_steps:
            for r in recs:
                r.setdefault("max_steps", self.max_steps)
        if self.parser.progress:
            self.progress = dict(self.parser.progress)
            if self.max_steps and not self.progress.get("total"):
                self.progress["total"] = self.max_steps
            self._stated(self.progress.get("total"))
        self._append(path_of(self.job, "log"), recs)

    def _stated(self, total: object) -> None:
        """A source stated the run's total steps: it stays known (``known_total``)."""
        if isinstance(total, (int, float)) and not isinstance(total, bool) and total > 0:
            self.total = int(total)

    def _events(self, t: float) -> bool:
        if time.time() >= self.next_scan:
            known = len(self.tb)
            for p in find_event_files(tb_roots(self.job, self.spec), self.since):
                self.tb.setdefault(p, self.tfevents.FileState())
            self.attempt_found = self.attempt_found or len(self.tb) > known
            every, fast_for = SCAN_NEW_ATTEMPT
            fast = not self.attempt_found and time.time() < self.attempt_at + fast_for
            self.next_scan = time.time() + (every if fast else SCAN_EVERY[bool(self.tb)])
        recs: List[MetricRecord] = []
        before = {p: s.offset for p, s in self.tb.items()}
        for p, state in self.tb.items():
            rec: Optional[MetricRecord] = None
            for wall, step, values in self.tfevents.read_new(p, state):
                vals = {tb_key(tag): _f32(v) for tag, v in values if tag != "hp_metric"}
                if not vals:
                    continue
                if rec is None or rec.get("step") != step:
                    if rec is not None:
                        recs.append(rec)
                    rec = {"t": round(wall, 3) if wall else t}
                    if step is not None:
                        rec["step"] = step
                rec.update(vals)
            if rec is not None:
                recs.append(rec)
        self._append(path_of(self.job, "tensorboard"), recs)
        return bool(recs) or before != {p: s.offset for p, s in self.tb.items()}

    def _append(self, path: Path, recs: List[MetricRecord]) -> None:
        for r in recs:
            self._stated(r.get("max_steps"))
        if recs:
            with open(str(path), "a") as f:  # each line as json.dumps(r, sort_keys=True) writes it
                f.write("".join([record_line(r) + "\n" for r in recs]))

    def _save(self) -> None:
        doc = {"log_offset": self.log_offset, "progress": self.progress, "total": self.total, "parser": self.parser.carry(),
               "tb": {p: {"offset": s.offset, "corrupt": s.corrupt, "bad_records": s.bad_records}
                      for p, s in self.tb.items()}}
        try:  # a cache: no fsync on every tick
            atomicfile.write(self.job.path / STATE, json.dumps(doc), durable=False)
        except OSError:  # a full disk: the offsets are a cache (read again next time), never a leftover
            pass
