"""The remote layout under ``<root>`` and small file helpers (atomic JSON writes)."""

import errno
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from remote.core import atomicfile
from remote.core.jobrecord import JobRecord
from remote.core.spec import JobSpec


def now() -> float:
    return time.time()


# the folder holding the remote package (``<root>/agent/<version>``): what a child agent process
# needs on PYTHONPATH, and whose name is the agent's version
AGENT_DIR = Path(__file__).resolve().parent.parent.parent
RESERVE_NAME = ".reserve"  # under <root>: space given back when a state cannot be recorded
RESERVE_BYTES = 4 << 20
_reserve = []  # type: list  # the Root's reserve file, once a Root is made in this process


def write_json_once(path: Path, data: Any, mode: int = 0o644) -> None:
    """``write_json`` without the reserve (remote/core/atomicfile.py: a writer's own temporary name, fsync,
    rename, the folder fsynced)."""
    atomicfile.write(path, json.dumps(data, indent=1, sort_keys=True), mode)


def write_json(path: Path, data: Any, mode: int = 0o644) -> None:
    """Write ``data`` as JSON atomically: a reader sees the old or the new file, never half.

    On a full disk the root's reserve file is given back once and the write retried, so a
    job's final state is still recorded."""
    with_reserve(lambda: write_json_once(path, data, mode))


def with_reserve(write: Callable[[], Any]) -> Any:
    """Run ``write``; on a full disk give the root's reserve back once and run it again.

    For the few writes that must land on a full disk: a final state, a stop request."""
    try:
        return write()
    except OSError as e:
        if e.errno != errno.ENOSPC or not release_reserve():
            raise
        return write()


def release_reserve() -> bool:
    """Delete the reserve file (True if there was one to give back)."""
    for r in _reserve:
        try:
            os.unlink(str(r))
            return True
        except OSError:
            pass
    return False


def make_reserve(root: Path) -> None:
    """Keep ``RESERVE_BYTES`` set aside under ``root`` while the disk has room for it."""
    r = root / RESERVE_NAME
    try:
        if r.stat().st_size >= RESERVE_BYTES:
            return
    except OSError:
        pass
    try:
        st = os.statvfs(str(root))
        if st.f_bavail * st.f_frsize < 4 * RESERVE_BYTES:
            return  # too little room: the reserve would be the thing that fills the disk
        tmp = root / (RESERVE_NAME + ".tmp")
        with open(str(tmp), "wb") as f:
            f.write(b"\0" * RESERVE_BYTES)  # real blocks, not a sparse file
            f.flush()
            os.fsync(f.fileno())
        os.replace(str(tmp), str(r))
    except OSError:
        try:
            os.unlink(str(root / (RESERVE_NAME + ".tmp")))
        except OSError:
            pass


def read_json(path: Path, default: Any = None) -> Any:
    try:
        with open(str(path)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def read_doc(path: Path) -> Dict[str, Any]:
    """A JSON object from ``path``; ``{}`` when it is missing, unreadable or not an object."""
    doc = read_json(path, {})
    return doc if isinstance(doc, dict) else {}


def append_jsonl(path: Path, record: Mapping[str, object]) -> None:
    with open(str(path), "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


class Root:
    """Paths under gpujob's root on this machine."""

    def __init__(self, root: str) -> None:
        self.root = Path(os.path.expanduser(root)).resolve()
        _reserve[:] = [self.root / RESERVE_NAME]

    @property
    def jobs(self) -> Path:
        return self.root / "jobs"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def envs(self) -> Path:
        return self.root / "envs"

    @property
    def agent_log(self) -> Path:
        return self.root / "agent.log"

    def project_code(self, project: str) -> Path:
        return self.root / "projects" / project / "code"

    def job(self, job_id: str) -> "JobDir":
        return JobDir(self.jobs / job_id)

    def instance_id(self) -> str:
        """This root's identity (``<root>/instance.id``, made on first use): two host profiles that
        reach one instance and root (a login line added twice) list each job once. "" where the
        root cannot be written."""
        path = self.root / "instance.id"

        def valid(raw: Optional[bytes]) -> bool:
            return raw is not None and len(raw.strip()) == 32 and all(c in b"0123456789abcdef" for c in raw.strip())

        try:
            with open(str(path), "rb") as f:
                raw = f.read(64)  # type: Optional[bytes]
        except OSError:
            raw = None
        if not valid(raw):
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                raw = atomicfile.update(path, lambda old: old if valid(old) else os.urandom(16).hex().encode())
            except OSError:
                return ""
        return (raw or b"").strip().decode()

    def ensure(self) -> None:
        for p in (self.jobs, self.data, self.envs, self.root / "projects"):
            p.mkdir(parents=True, exist_ok=True)
        make_reserve(self.root)


class JobDir:
    """One job's folder (see DESIGN.md: remote layout)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.id = path.name

    def __getattr__(self, name: str) -> Path:
        files = {
            "spec": "spec.json", "status_file": "status.json", "events": "events.jsonl",
            "log": "output.log", "metrics": "metrics.jsonl", "gpu": "gpu.jsonl", "ckpt": "ckpt",
            "tb": "tb", "code": "code", "secrets": "secrets.json", "stop_file": "STOP",
            "supervisor_log": "agent.log",
            # the stop protocol's side files (remote/stopping): the runtime helper's or hook's mark that it
            # watches STOP, its mark that it told the code to stop, the stop verb's note that the run command
            # had ended before the stop was asked, a stop-after-the-next-checkpoint request
            "stop_watch": "STOP.watch", "stop_acted": "STOP.acted", "stop_ended": "STOP.ended",
            "stop_after": "stop.after",
        }
        if name in files:
            return self.path / files[name]
        raise AttributeError(name)

    def record(self) -> JobRecord:
        """status.json, typed (remote/core/jobrecord.py): the one door in; a missing or unreadable
        file reads as an empty record."""
        return JobRecord(read_doc(self.status_file))

    def write_record(self, record: JobRecord) -> None:
        """The one door out: written atomically, with the root's reserve on a full disk."""
        write_json(self.status_file, record.doc)

    def event(self, kind: str, **fields: Any) -> None:
        rec = {"t": round(now(), 3), "event": kind}
        rec.update(fields)
        try:
            append_jsonl(self.events, rec)
        except OSError:  # a full disk: status.json (with the reserve) is the record that must be written
            pass

    def spec_data(self) -> Dict[str, Any]:
        return read_doc(self.spec)

    def job_spec(self) -> "JobSpec":
        """spec.json, typed (an unreadable one reads as all defaults, as ``spec_data`` reads ``{}``)."""
        return JobSpec(read_doc(self.spec))

    def secrets_data(self) -> Dict[str, str]:
        return read_doc(self.secrets)


def agent_log(root: Root, msg: str) -> None:
    """Append a line to ``<root>/agent.log``: the agent's own errors, readable with ``gpujob doctor``."""
    try:
        with open(str(root.agent_log), "a") as f:
            f.write("{} [{}] {}\n".format(time.strftime("%Y-%m-%d %H:%M:%S"), os.getpid(), msg))
    except OSError:
        pass


def read_tail(path: Path, max_bytes: int) -> Tuple[bytes, int]:
    """(the last ``max_bytes`` of a file, its size); (b"", 0) when it cannot be read."""
    try:
        with open(str(path), "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read(), size
    except OSError:
        return b"", 0


def tail_lines(path: Path, n: int = 20, max_bytes: int = 65536) -> list:
    """The last ``n`` lines of a text file, reading at most ``max_bytes`` from its end."""
    data, _ = read_tail(path, max_bytes)
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[-n:]


def screen_lines(path: Path, n: int = 20, max_bytes: int = 65536) -> list:
    """The last ``n`` lines of a log as a terminal showed them: a line that a progress bar redrew in
    place (``\\r``) is its last drawing, not one line per redraw (a tqdm bar's redraws pushed the top
    of a traceback out of a failure's 20 lines)."""
    data, _ = read_tail(path, max_bytes)
    out = []
    for line in data.decode("utf-8", "replace").split("\n"):
        shown = [seg for seg in line.split("\r") if seg.strip()]
        out.append(shown[-1].rstrip() if shown else line.strip("\r"))
    if out and out[-1] == "":
        out.pop()
    return out[-n:]


def last_json_line(path: Path) -> Optional[Dict[str, Any]]:
    for line in reversed(tail_lines(path, 5, 16384)):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None
