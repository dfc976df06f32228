"""A job's record on the instance (``status.json``), typed once: :class:`JobRecord`.

Its one door is ``JobDir.record()`` / ``JobDir.write_record()`` (remote/core/layout.py); the
supervisor keeps its own copy through remote/run/record.py, which uses the same door. ``doc`` is
the document as written: keys this module does not know (an older or newer writer's) are kept and
written back. A field of a type no writer of ours produces (a hand edit, a damaged disk) is
dropped when the record is read (``clean``: readers did arithmetic on it), and any other reads as
its default at the attribute, so one damaged field costs that field, not every ``status`` or
``ls`` of the host (tests/faults/test_damaged_state.py). Whether the job lives is judged on this
record in one place: remote/core/liveness.py.
"""

from typing import Any, Callable, Dict, Generic, List, Mapping, Optional, TypedDict, TypeVar, Union

from remote.core.jsontypes import is_object

T = TypeVar("T")
Row = TypeVar("Row")


class Attempt(TypedDict, total=False):
    """One entry of ``attempts``, as the supervisor writes it (remote/run/supervisor.py)."""
    n: int
    started_at: float
    resume: Optional[str]  # the checkpoint it resumed from
    pid: int
    batch_divisor: int
    ended_at: float
    exit_code: int
    reason: str
    summary: Optional[str]
    stop_came_late: str

# fields every reader does arithmetic on: a damaged one ("abc", 1e400, a list) is dropped at the door
_NUMBERS = ("heartbeat", "submitted_at", "started_at", "ended_at", "resumed_at", "next_attempt_at", "attempt",
            "supervisor_pid", "child_pid", "exit_code", "restart_base", "batch_divisor", "queue_position", "requeues")
_INTEGERS = ("attempt", "supervisor_pid", "child_pid", "exit_code", "restart_base", "batch_divisor", "queue_position",
             "requeues")


def _number_ok(v: Any, integer: bool) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if integer:
        return isinstance(v, int) and abs(v) < 1 << 62
    return v == v and abs(v) < 1e15  # finite, and a time (epoch seconds) or a count


def clean(st: Dict[str, object]) -> Dict[str, object]:
    """``st`` without the fields whose type no writer of ours produces."""
    for k in _NUMBERS:
        if k in st and st[k] is not None and not _number_ok(st[k], k in _INTEGERS):
            del st[k]
    for k in ("state", "name", "project", "reason", "lost_reason", "stopping"):
        if k in st and st[k] is not None and not isinstance(st[k], str):
            del st[k]
    if "attempts" in st:
        got = st["attempts"]
        st["attempts"] = [a for a in got if isinstance(a, dict)] if isinstance(got, list) else []
    for k in ("diagnosis", "moves"):
        if k in st and not isinstance(st[k], (dict if k == "diagnosis" else list)):
            del st[k]
    return st


def _text(v: Any) -> Optional[str]:
    return v if isinstance(v, str) else None


def _int(v: Any) -> Optional[int]:
    return v if _number_ok(v, True) else None


def _time(v: Any) -> Optional[float]:
    return v if _number_ok(v, False) else None


def _flag(v: Any) -> Optional[bool]:
    return v if isinstance(v, bool) else None


def _table(v: Any) -> Optional[Dict[str, object]]:
    return v if isinstance(v, dict) else None


def _rows(v: Any) -> Optional[List[Row]]:  # the Key names its rows' kind
    if not isinstance(v, list):
        return None
    return v if all(isinstance(a, dict) for a in v) else list(filter(is_object, v))  # the record's own list


def _pids(v: Any) -> Optional[List[int]]:
    return [p for p in v if _number_ok(p, True)] if isinstance(v, list) else None


class Key(Generic[T]):
    """One key of ``status.json``: its value where it has the type our writers give it, else the
    default. Assigning writes the key (``None`` included: a null field, as the writers record it)."""

    def __init__(self, kind: Callable[[Any], Optional[T]], default: Callable[[], T]) -> None:
        self.kind, self.default, self.key = kind, default, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name

    def __get__(self, rec: "JobRecord", owner: Optional[type] = None) -> T:
        v = self.kind(rec.doc.get(self.key))
        return self.default() if v is None else v

    def __set__(self, rec: "JobRecord", value: T) -> None:
        rec.doc[self.key] = value


def _none() -> None:
    return None


def text() -> "Key[Optional[str]]":
    return Key(_text, _none)


def integer() -> "Key[Optional[int]]":
    return Key(_int, _none)


def when() -> "Key[Optional[float]]":
    return Key(_time, _none)


def flag() -> "Key[bool]":
    return Key(_flag, lambda: False)


class JobRecord:
    """One job's ``status.json``. ``doc`` is the document (what is written back)."""

    # what the job is, and where it stands
    job_id = text()
    name = text()
    project = text()
    host = text()
    state = text()
    attempt = integer()  # the attempt now (1 first); restart_base: the attempt a resume started from
    restart_base = integer()
    # {attempt, started_at, ended_at, ...}: the record's own list (append to it once it is assigned)
    attempts = Key(_rows, list)  # type: Key[List[Attempt]]
    moves = Key(_rows, list)  # type: Key[List[Dict[str, object]]]  # {from, to, t, source} of each move here
    moved_to = text()
    # times (epoch seconds)
    submitted_at = when()
    started_at = when()
    ended_at = when()
    resumed_at = when()
    next_attempt_at = when()
    heartbeat = when()  # the supervisor's last write
    # the supervisor and its processes
    supervisor_pid = integer()
    boot_id = text()  # the boot the supervisor runs in: another one means the instance rebooted
    agent = text()  # the agent version the supervisor runs
    child_pid = integer()
    cgroup = text()
    cgroup_note = text()
    # GPUs
    cuda_visible_devices = text()
    waiting_for_gpus = flag()
    gpus_held = flag()
    queue_reason = text()
    queue_position = integer()
    gpu_error = text()
    batch_divisor = Key(_int, lambda: 1)  # type: Key[int]  # on_oom: halve_batch doubles it
    # how an attempt ended (remote/run/record.py ATTEMPT_END_FIELDS: none outlive it)
    reason = text()
    exit_code = integer()
    lost_reason = text()
    diagnosis = Key(_table, _none)  # type: Key[Optional[Mapping[str, object]]]
    remedy = text()
    stopping = text()  # a stop is under way: its reason
    killed = Key(_pids, list)  # type: Key[List[int]]
    survivors = Key(_pids, list)  # type: Key[List[int]]
    supervisor_unresponsive = text()
    # a job on a Slurm host: its Slurm job id (sbatch's answer; the same id through requeues), the node(s)
    # the supervisor last ran on, and how many times Slurm started it again (remote/core/slurmq.py)
    slurm_job = text()
    slurm_nodes = text()
    requeues = integer()
    # notes the supervisor keeps
    stray_noted = flag()
    kept_copy = text()
    restored = text()

    def __init__(self, doc: Optional[Mapping[str, Any]] = None) -> None:
        self.doc = clean(dict(doc) if isinstance(doc, Mapping) else {})  # type: Dict[str, object]

    @classmethod
    def of(cls, record: "RecordLike") -> "JobRecord":
        """A JobRecord from a status document (or the JobRecord itself)."""
        return record if isinstance(record, JobRecord) else cls(record)

    def update(self, **changes: Any) -> "JobRecord":
        """Set several keys at once (the writers' ``save(state=..., ended_at=...)``)."""
        self.doc.update(changes)
        return self

    def drop(self, *keys: str) -> None:
        """Remove keys (an ended attempt's fields, a resumed run's)."""
        for k in keys:
            self.doc.pop(k, None)

    def add_attempt(self, attempt: Attempt) -> Attempt:
        """Append an attempt's entry (its own dict, updated as the attempt ends)."""
        self.attempts = self.attempts + [attempt]
        return attempt

    def has(self, key: str) -> bool:
        return key in self.doc

    def copy(self) -> "JobRecord":
        return JobRecord(self.doc)

    def to_dict(self) -> Dict[str, object]:
        return dict(self.doc)


RecordLike = Union[JobRecord, Mapping[str, Any], None]
