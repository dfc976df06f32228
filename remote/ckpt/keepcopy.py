"""A copy of the last complete version of each checkpoint file the job rewrites in place.

nanoGPT's ``ckpt.pt``, a loop's ``model.pt``, Lightning's ``last.ckpt``: one file, no step in its
name, overwritten by every save. ``torch.save`` opens it with O_TRUNC, so a kill in the middle of a
save (OOM killer, preemption, power loss) leaves the only checkpoint cut short. While the job runs,
``Keeper`` copies each such file once it is complete and changed since the last copy into
``<job>/kept/`` (outside the checkpoint folder: discovery, rotation, pull, sync and the mirror do not
see it); before an attempt starts, ``restore`` puts the copy back where the file is missing or cut short.

Standard library only, Python 3.8+. Copies run in a thread, at idle I/O priority where the kernel
lets us, by ``copy_file_range`` (a reflink on btrfs/XFS) else a plain copy, into a temporary name
renamed into place once the copy is verified whole.

The copy never takes room the job needs (``diskbudget``): it is made only when the job's next save
and the margin stay free beside it, a copy under way stops when that room runs short, and the kept
copies are deleted (said once in the log and ``status``) the moment free space falls below it.
"""

import ctypes
import io
import os
import platform
import threading
import time
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, TypedDict

from remote.ckpt import checkpoints as ck
from remote.ckpt import diskbudget
from remote.ckpt.checkpoints import completeness, formats
from remote.core.jsontypes import is_object
from remote.core.layout import read_doc, write_json_once
from remote.core.spec import JobSpec

KEPT = "kept"  # under the job folder
INDEX = ".kept.json"  # rel -> {size, mtime_ns, step} of the source when it was copied
KEEP_EVERY = 2.0  # seconds between looks (a save is copied within this of its end)
CHUNK = 64 << 20  # a copy under way asks the budget again after each chunk


class KeptRecord(TypedDict, total=False):
    """A kept copy's entry in INDEX: its source's size and mtime when copied, the step saved, when."""
    size: int
    mtime_ns: int
    step: Optional[int]
    at: float


STEP_KEYS = ("iter_num", "global_step", "step", "epoch")  # what a script's own dict calls its progress


def kept_dir(job_path: Path) -> Path:
    return job_path / KEPT


def in_place(found: List[Any]) -> List[Any]:
    """The single-file checkpoints rewritten in place: no step in the name, a regular file (not a link)."""
    return [c for c in found if not c.is_dir and c.step is None and not c.path.is_symlink()]


def low_io_priority() -> None:
    """Idle I/O class for this thread (ioprio_set); nothing where the call is unknown or refused."""
    nr = {"x86_64": 251, "aarch64": 30}.get(platform.machine())
    get_id = getattr(threading, "get_native_id", None)
    if nr is None or get_id is None:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall(nr, 1, get_id(), 3 << 13)  # IOPRIO_WHO_PROCESS, this thread, IOPRIO_CLASS_IDLE
    except (OSError, AttributeError):
        pass


def _drop_cache(path: Path) -> None:
    """The copy is read only after a crash: its pages need not push the training's data out of the cache."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        pass


def copy_file(src: Path, dst: Path, check: Callable[[Path, os.stat_result], bool],
              go_on: Callable[[], bool] = lambda: True) -> bool:
    """``src`` to ``dst`` through a temporary name beside it (same extension, so the format check applies),
    fsynced, the source's mtime kept, renamed over ``dst`` only when ``check(tmp, source's stat at the
    start)`` says it is whole: an earlier good copy is never replaced by a bad one. True when renamed.
    ``go_on`` is asked after each CHUNK: False drops the copy (its temporary file) at once."""
    tmp = dst.with_name(".gpujob-tmp." + dst.name)
    try:
        with open(str(src), "rb") as fi, open(str(tmp), "wb") as fo:
            st = os.fstat(fi.fileno())
            done = 0
            cfr = getattr(os, "copy_file_range", None)
            while cfr is not None and done < st.st_size:
                try:
                    n = cfr(fi.fileno(), fo.fileno(), min(st.st_size - done, CHUNK))
                except OSError:  # across filesystems on an old kernel, a filesystem without it
                    break
                if n <= 0:
                    break
                done += n
                if not go_on():
                    raise _GaveUp()
            fi.seek(done)
            fo.seek(done)
            since = 0
            while True:
                block = fi.read(1 << 20)
                if not block:
                    break
                fo.write(block)
                since += len(block)
                if since >= CHUNK:
                    since = 0
                    if not go_on():
                        raise _GaveUp()
            fo.flush()
            os.fsync(fo.fileno())
        os.utime(str(tmp), ns=(st.st_atime_ns, st.st_mtime_ns))
        if not check(tmp, st):
            os.unlink(str(tmp))
            return False
        os.replace(str(tmp), str(dst))
        return True
    except _GaveUp:
        _unlink(tmp)
        return False
    except BaseException:
        _unlink(tmp)
        raise


class _GaveUp(Exception):
    """A copy stopped because the job needs the room it was taking."""


def _unlink(path: Path) -> None:
    try:
        os.unlink(str(path))
    except OSError:
        pass


def _unchanged_and_whole(src: Path) -> Callable[[Path, os.stat_result], bool]:
    """The check of a copy: its source was not rewritten while it was read, and the copy is whole."""
    def check(tmp: Path, st: os.stat_result) -> bool:
        after = src.stat()
        return (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns) and ck.file_whole(tmp, time.time())
    return check


def saved_step(path: Path) -> Optional[int]:
    """The step a torch.save'd dict records (nanoGPT's ``iter_num``, ``global_step``...), read without
    importing or running anything of the file; None when it says none."""
    import pickle

    class Reader(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            return formats._Anything

        def persistent_load(self, pid: Any) -> Any:
            return formats._Anything()

    try:
        with zipfile.ZipFile(str(path)) as z:
            pkl = [n for n in z.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
            if not pkl or z.getinfo(pkl[0]).file_size > ck.PICKLE_MAX:
                return None
            doc = Reader(io.BytesIO(z.read(pkl[0]))).load()
    except Exception:  # noqa: BLE001 - not a torch archive, an odd pickle: no step known
        return None
    if isinstance(doc, dict):
        for k in STEP_KEYS:
            v = doc.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    return None


class Keeper:
    """A watcher of the supervisor: every KEEP_EVERY s, copies each in-place checkpoint file that is
    complete and changed since its last copy (one copy at a time, in a thread)."""

    def __init__(self, job: Any, ckpt_dir: Path, pattern: Optional[str], note: Any,
                 say: Callable[[str], None] = lambda text: None) -> None:
        self.job, self.ckpt_dir, self.pattern, self.note, self.say = job, ckpt_dir, pattern, note, say
        self.dir = kept_dir(job.path)
        self.next_at = 0.0
        self.thread = None  # type: Optional[threading.Thread]
        self.skipped = set()  # type: set  # files whose skip was noted once
        self.budget = diskbudget.Budget(ckpt_dir, pattern, self.kept_sizes)
        self.pids = None  # type: Any  # the job's processes (its files open for writing are a save under way)
        self.gave_up = False

    def kept_sizes(self) -> int:
        """The largest save the kept copies recorded (the job's next save is as big, even while a save in
        place has truncated its file)."""
        sizes = [rec.get("size") for rec in read_doc(self.dir / INDEX).values() if isinstance(rec, dict)]
        return max([s for s in sizes if isinstance(s, int)] or [0])

    def tick(self, sup: Any) -> Optional[str]:
        if time.monotonic() < self.next_at:
            return None
        self.next_at = time.monotonic() + KEEP_EVERY
        self.pids = sup.job_pids
        try:
            if self.held() and self.budget.short(self.dir, self.pids):
                self.give_up()
                return None
            if self.thread is not None and self.thread.is_alive():
                return None
            todo = self.changed(sup.job_pids)
        except Exception:  # noqa: BLE001 - housekeeping never takes the job down (a file gone mid-look)
            return None
        if todo:
            self.thread = threading.Thread(target=self.copy_all, args=(todo,), name="gpujob-keepcopy", daemon=True)
            self.thread.start()
        return None

    def wait(self, timeout: Optional[float] = None) -> None:
        if self.thread is not None:
            self.thread.join(timeout)

    def changed(self, pids: Any) -> List[Tuple[str, Path, os.stat_result]]:
        """The in-place files changed since their last copy and complete now (only those are checked:
        a tick where nothing changed reads no file)."""
        index = read_doc(self.dir / INDEX)
        out = []
        for c in in_place(ck.find(self.ckpt_dir, self.pattern, check=False)):
            st = c.path.stat()
            was = index.get(c.rel(self.ckpt_dir)) or {}
            if was.get("size") != st.st_size or was.get("mtime_ns") != st.st_mtime_ns:
                out.append((c, st))
        if out:
            completeness.judge([c for c, _ in out], completeness.open_writers([c for c, _ in out], self.ckpt_dir, pids))
        return [(c.rel(self.ckpt_dir), c.path, st) for c, st in out if c.complete]

    def copy_all(self, todo: List[Tuple[str, Path, os.stat_result]]) -> None:
        low_io_priority()
        for rel, src, st in todo:
            try:
                self.copy_one(rel, src, st)
            except Exception as e:  # noqa: BLE001 - a copy that fails must never take the job down
                if not self.gave_up:  # (a copy whose file give_up deleted under it: said already)
                    self.note_once(rel, "could not keep a copy of {}: {}".format(rel, e))

    def held(self) -> bool:
        """Whether a kept copy (or one under way) takes room now."""
        return self.dir.is_dir() and any(p.is_file() and p.name != INDEX for p in self.dir.rglob("*"))

    def give_up(self) -> None:
        """Free space fell below what the job's next save needs: every kept copy goes, said once."""
        r = self.budget.reserve(self.dir, self.pids)
        for p in sorted(self.dir.rglob("*"), reverse=True):
            if p.is_file() or p.is_symlink():
                _unlink(p)
        if not self.gave_up:
            self.gave_up = True
            text = "kept copy given up and deleted: the disk has {} free, less than the job's next save and the " \
                   "margin ({}); a save in place cut short now has no copy to come back to".format(
                       diskbudget.mb(r["free"]), diskbudget.mb(r["need"]))
            self.note(text)
            self.say(text)

    def copy_one(self, rel: str, src: Path, st: os.stat_result) -> None:
        dst = self.dir / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        # the new copy is whole beside the old one before it replaces it: its full size counts
        r = self.budget.reserve(self.dir, self.pids)
        if r["free"] - st.st_size < r["need"]:
            if self.gave_up:  # said when the copy was given up; said again only after a copy was kept
                return
            self.note_once(rel, "no copy kept of {} ({}): it would leave {} free, less than the job's next save "
                           "and the margin ({}); a save cut short there loses it".format(
                               rel, diskbudget.mb(st.st_size), diskbudget.mb(r["free"] - st.st_size),
                               diskbudget.mb(r["need"])))
            return

        def room_left() -> bool:  # the job's writes win: a copy under way stops when their room runs short
            return not self.budget.short(self.dir, self.pids)

        if not copy_file(src, dst, _unchanged_and_whole(src), room_left):
            return  # rewritten while copied or no room left: the earlier copy stays, the next look decides again
        _drop_cache(dst)
        self.gave_up = False
        index = read_doc(self.dir / INDEX)
        index[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "step": saved_step(dst), "at": time.time()}
        # not layout.write_json: a full disk must not spend the reserve kept for the job's final state
        write_json_once(self.dir / INDEX, index)

    def note_once(self, rel: str, text: str) -> None:
        if rel not in self.skipped:
            self.skipped.add(rel)
            self.note(text)


def restorable(job_path: Path, ckpt_dir: Path, pattern: Optional[str] = None) -> List[Tuple[str, KeptRecord]]:
    """(rel, record) of each kept copy that is whole while its file in the checkpoint folder is missing or
    cut short (no process of the job runs now)."""
    index = read_doc(kept_dir(job_path) / INDEX)
    if not index:
        return []
    found = {c.rel(ckpt_dir): c for c in ck.find(ckpt_dir, pattern, pids=[])} if ckpt_dir.is_dir() else {}
    out: List[Tuple[str, KeptRecord]] = []  # the index's records: Keeper.keep wrote them
    for rel, rec in sorted(index.items()):
        c = found.get(rel)
        if c is not None and c.complete or not is_object(rec) or ".." in Path(rel).parts:
            continue
        target = ckpt_dir / rel
        if c is None and os.path.lexists(str(target)):
            continue  # there, but no checkpoint now (a link, a folder): not ours to replace
        if ck.file_whole(kept_dir(job_path) / rel):
            out.append((rel, rec))
    return out


def restore(job_path: Path, ckpt_dir: Path, pattern: Optional[str] = None) -> List[Tuple[str, Optional[int]]]:
    """Put each restorable kept copy back in its place (a copy beside it, renamed over it); (rel, step).
    No copy runs now: what one cut short (the supervisor ended during it) is removed."""
    for tmp in kept_dir(job_path).rglob(".gpujob-tmp.*"):
        try:
            tmp.unlink()
        except OSError:
            pass
    done = []
    for rel, rec in restorable(job_path, ckpt_dir, pattern):
        target = ckpt_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not copy_file(kept_dir(job_path) / rel, target, lambda tmp, st: ck.file_whole(tmp, time.time())):
            continue
        step = rec.get("step")
        done.append((rel, step if isinstance(step, int) else None))
    return done


def stand_ins(job_path: Path) -> Dict[str, Tuple[Path, KeptRecord]]:
    """For ``pull --latest`` and ``move``: ``ckpt/<rel>`` -> (the kept copy, its record) of each in-place
    file that is cut short or gone now while its kept copy is whole."""
    spec = JobSpec(read_doc(job_path / "spec.json"))
    if not spec.checkpoint.backup:
        return {}
    return {"ckpt/" + rel: (kept_dir(job_path) / rel, rec)
            for rel, rec in restorable(job_path, job_path / "ckpt", spec.checkpoint.pattern)}
