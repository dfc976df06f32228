"""Whether a single checkpoint file is whole by its format: a ``torch.save`` zip archive with its
central directory and every record its pickle names (the pickle read without importing or running
anything), a safetensors file as long as its header says; other formats when settled."""

import json
import struct
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .kinds import SETTLE

if TYPE_CHECKING:
    import zipfile


def zip_whole(path: Path) -> Optional[bool]:
    """True/False for a zip archive (torch.save's format) with/without all it needs; None when the file
    is no zip archive at all. A torch archive must also hold every tensor its ``data.pkl`` names:
    torch.save interrupted by an exception (KeyboardInterrupt from a stop's SIGINT, a full disk) still
    writes the central directory on its way out, so the zip reads whole and ``torch.load`` fails."""
    try:
        st = path.stat()
        with open(str(path), "rb") as f:
            if f.read(4) != b"PK\x03\x04":
                return None
    except OSError:
        return False
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key in _ZIP_SEEN:
        return _ZIP_SEEN[key]
    import zipfile  # here: a status of a job with no torch archive (yet) does without it

    try:
        with zipfile.ZipFile(str(path)) as z:
            whole = _torch_records_whole(z) is not False
    except (OSError, zipfile.BadZipFile, ValueError, EOFError, RuntimeError, NotImplementedError):
        whole = False
    if len(_ZIP_SEEN) >= 256:
        _ZIP_SEEN.clear()
    _ZIP_SEEN[key] = whole
    return whole


_ZIP_SEEN: Dict[Tuple[str, int, int], bool] = {}  # (path, size, mtime): the agent's serve asks often
PICKLE_MAX = 64 << 20  # a data.pkl larger than this is not read (trusted as the zip says)


class _Anything(object):
    """Stands for every class a torch pickle names: nothing of the file is imported or run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> "_Anything":
        return _Anything()

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass


def _torch_records_whole(z: "zipfile.ZipFile") -> Optional[bool]:
    """Whether a torch.save archive holds ``data/<key>`` for every storage its ``data.pkl`` names (its
    records are written after data.pkl); None for a zip that is no torch archive or a pickle not read."""
    import pickle

    names = set(z.namelist())
    pkl = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if not pkl:  # torch's end of file without its pickle: interrupted before the first record
        return False if any(n.endswith("/.data/serialization_id") for n in names) else None
    info = z.getinfo(pkl[0])
    if info.file_size > PICKLE_MAX:
        return None
    keys: List[str] = []

    class Reader(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            return _Anything

        def persistent_load(self, pid: Any) -> Any:
            if isinstance(pid, tuple) and len(pid) > 2 and pid[0] == "storage":
                keys.append(str(pid[2]))
            return _Anything()

    import io

    try:
        Reader(io.BytesIO(z.read(pkl[0]))).load()
    except Exception:  # noqa: BLE001 - an odd pickle is not judged here
        return None
    root = pkl[0][: -len("data.pkl")]
    return all(root + "data/" + k in names for k in keys)


def _safetensors_whole(path: Path, size: int) -> Optional[bool]:
    """A safetensors file is whole when it is as long as its JSON header says."""
    try:
        with open(str(path), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            if n <= 0 or n > 100 << 20:
                return False
            header = json.loads(f.read(n).decode("utf-8"))
    except (OSError, ValueError, struct.error, UnicodeDecodeError):
        return False
    end = 0
    for k, v in header.items():
        if k != "__metadata__" and isinstance(v, dict):
            end = max(end, int((v.get("data_offsets") or [0, 0])[1]))
    return size == 8 + n + end


def file_whole(path: Path, now: Optional[float] = None) -> bool:
    """Whether a single checkpoint file is whole by its format (or, unknown, unchanged for SETTLE s)."""
    try:
        st = path.stat()
    except OSError:
        return False
    if st.st_size == 0:
        return False
    z = zip_whole(path)
    if z is not None:
        return z
    if path.name.endswith(".safetensors"):
        return bool(_safetensors_whole(path, st.st_size))
    return (now if now is not None else time.time()) - st.st_mtime >= SETTLE
