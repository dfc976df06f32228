"""The one way gpujob rewrites a file that several processes share (issue 35), on the instance and,
through ``bundle.import_remote``, on the laptop.

- ``write``: a temporary name of this writer's own (pid and random bytes: two writers never
  truncate each other's file), written, fsynced, renamed over the file, the folder fsynced. A
  reader sees the old file or the new one, never a part.
- ``locked``: an advisory ``flock`` on a sidecar (``.<name>.lock`` beside the file, never
  removed: a lock file that is deleted and made again lets two holders in). Around a
  read-modify-write (``update``) and around appends to a file someone may rewrite (``append``),
  so no writer's change is lost to another's.

Readers take no lock. Hold no lock of this module while asking for the same one again (flock
locks of two opens of a file exclude each other, even within one process).
"""

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Union

from remote.core import filelock

PathLike = Union[str, Path]


def lock_path(path: PathLike) -> Path:
    """The sidecar lock of ``path``."""
    p = Path(path)
    return p.with_name(p.name + ".lock" if p.name.startswith(".") else "." + p.name + ".lock")


@contextlib.contextmanager
def locked(path: PathLike, mode: int = 0o600) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (its folder must exist)."""
    with filelock.locked(lock_path(path), mode=mode):  # closing the last descriptor lets the lock go
        yield


def temp_name(path: PathLike) -> Path:
    """A temporary name beside ``path`` that no other writer uses."""
    p = Path(path)
    return p.with_name(".{}.{}.{}.tmp".format(p.name.lstrip("."), os.getpid(), os.urandom(4).hex()))


def sync_folder(folder: PathLike) -> None:
    """fsync a folder, so a rename in it survives a crash (where folders cannot be opened: skipped)."""
    try:
        fd = os.open(str(folder), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write(path: PathLike, data: Union[bytes, str], mode: int = 0o644, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically, the file ``mode`` exactly (not the umask's).
    ``durable``: fsync the file before the rename and the folder after (off for caches that
    are only read back as a hint)."""
    p = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = temp_name(p)
    try:
        fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            os.fchmod(fd, mode)
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(str(tmp), str(p))
    except BaseException:
        try:  # never a temporary file left behind (on a full disk they piled up)
            os.unlink(str(tmp))
        except OSError:
            pass
        raise
    if durable:
        sync_folder(p.parent)


def read(path: PathLike) -> Optional[bytes]:
    """``path``'s bytes; None when there is no such file."""
    try:
        with open(str(path), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def update(path: PathLike, change: Callable[[Optional[bytes]], Optional[bytes]], mode: int = 0o644,
           durable: bool = True) -> Optional[bytes]:
    """Read-modify-write under the file's lock: ``change`` gets the current bytes (None: no file) and
    returns the new ones (None, or the same bytes: nothing is written). The bytes in place after."""
    with locked(path, 0o600 if mode & 0o077 == 0 else 0o644):
        old = read(path)
        new = change(old)
        if new is None or new == old:
            return old
        write(path, new, mode, durable)
        return new


def append(path: PathLike, data: Union[bytes, str], mode: int = 0o644, lock: bool = True) -> None:
    """Append ``data`` with one ``write`` (O_APPEND: appends of others never interleave with it),
    under the file's lock unless ``lock`` is off (a file nobody rewrites needs none)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with locked(path, 0o600 if mode & 0o077 == 0 else 0o644) if lock else contextlib.nullcontext():
        fd = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
        try:
            os.write(fd, raw)
        finally:
            os.close(fd)


def update_json(path: PathLike, edit: Callable[[Dict[str, Any]], Optional[bool]], mode: int = 0o644,
                durable: bool = True) -> Dict[str, Any]:
    """``update`` of a file holding a JSON object: ``edit`` changes the object as it is now (a missing
    or damaged file reads as ``{}``); it returns False to write nothing. The object after."""
    doc = {}  # type: Dict[str, Any]

    def change(raw: Optional[bytes]) -> Optional[bytes]:
        try:
            got = json.loads(raw.decode("utf-8")) if raw else {}
        except (ValueError, UnicodeDecodeError):
            got = {}
        doc.update(got if isinstance(got, dict) else {})
        return None if edit(doc) is False else json.dumps(doc).encode("utf-8")

    update(path, change, mode, durable)
    return doc
