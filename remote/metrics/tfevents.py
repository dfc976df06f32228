"""Scalars from TensorBoard event files, read with the standard library, incrementally.

An event file (``events.out.tfevents.<time>.<host>...``) is a TFRecord stream: frames of
uint64 LE length, uint32 masked CRC-32C of those 8 bytes, the data, uint32 masked CRC-32C of
the data. Each data is an ``Event`` protobuf: ``wall_time=1`` (double), ``step=2`` (int64),
``summary=5`` → ``Summary.value=1`` → ``Value{tag=1, simple_value=2, metadata=9, tensor=8}``.
torch's ``SummaryWriter.add_scalar`` writes ``simple_value``; TF2 and ``tensorboard.summary``
write a one-element ``TensorProto`` (``dtype=1``, ``tensor_shape=2``, ``tensor_content=4``,
``float_val=5``, ``double_val=6``, ``int_val=7``, ``int64_val=10``, ``half_val=13``).

A reader keeps the byte offset it reached: a frame not yet fully written (a torn tail) is left
for the next read, never parsed; a frame whose data fails its CRC is skipped (its length is
trustworthy); a length that fails its CRC leaves the rest of the file unread (``corrupt``).
"""

import struct
from typing import Dict, Iterator, List, Optional, Tuple, Union

# ---- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78); zlib.crc32 is a different CRC ----
_POLY = 0x82F63B78


def _table() -> List[int]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        out.append(c)
    return out


_TABLE = _table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# ---- protobuf wire format: only what Event/Summary/Value/TensorProto need ----------------------
def _varint(buf: bytes, pos: int) -> Tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def fields(buf: bytes) -> Iterator[Tuple[int, int, Union[int, bytes]]]:
    """(field number, wire type, value) of each field: an int for a varint (wire 0), bytes for the others."""
    pos, end = 0, len(buf)
    val: Union[int, bytes]
    while pos < end:
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, pos = _varint(buf, pos)
        elif wire == 1:
            val, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            val, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            val, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type {}".format(wire))
        if pos > end:
            raise ValueError("truncated field")
        yield num, wire, val


# TensorProto dtype → (struct code of one element, its size); DT_HALF travels as int32 bits in half_val
_DTYPES = {1: ("f", 4), 2: ("d", 8), 3: ("i", 4), 9: ("q", 8), 19: ("e", 2)}


def _signed(v: int, bits: int = 64) -> int:
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def _one_element(shape: bytes) -> bool:
    """A TensorShapeProto (``dim=2`` → ``Dim{size=1}``) of no dims, or only dims of size 1."""
    for num, wire, dim in fields(shape):
        if num == 2 and wire == 2 and isinstance(dim, bytes):
            size = [v for n, w, v in fields(dim) if n == 1 and w == 0]
            if size != [1]:
                return False
    return True


def _tensor_scalar(buf: bytes) -> Optional[float]:
    """The value of a one-element numeric TensorProto, else None (histograms, text, images)."""
    dtype, content, values = 0, None, []  # type: int, Optional[bytes], List[float]
    for num, wire, val in fields(buf):
        if num == 1 and isinstance(val, int):
            dtype = val
        elif num == 2 and wire == 2 and isinstance(val, bytes) and not _one_element(val):
            return None
        elif num == 4 and wire == 2 and isinstance(val, bytes):
            content = val
        elif num in (5, 6) and isinstance(val, bytes):  # wire 1, 2 or 5
            code, size = ("f", 4) if num == 5 else ("d", 8)
            raw = val
            values.extend(struct.unpack("<{}{}".format(len(raw) // size, code), raw[:len(raw) // size * size]))
        elif num in (7, 10, 13):
            if isinstance(val, int):
                ints = [val]
            elif wire == 2:
                ints, p = [], 0
                while p < len(val):
                    v, p = _varint(val, p)
                    ints.append(v)
            else:
                continue
            if num == 13:
                values.extend(struct.unpack("<e", struct.pack("<H", i & 0xFFFF))[0] for i in ints)
            else:
                values.extend(_signed(i, 32 if num == 7 else 64) for i in ints)
    if content is not None:
        kind = _DTYPES.get(dtype)
        if kind is None or len(content) != kind[1]:
            return None
        return float(struct.unpack("<" + kind[0], content)[0])
    if dtype not in _DTYPES or len(values) != 1:
        return None
    return float(values[0])


def _plugin(buf: bytes) -> str:
    """SummaryMetadata.plugin_data(1).plugin_name(1)."""
    for num, wire, val in fields(buf):
        if num == 1 and wire == 2 and isinstance(val, bytes):
            for n2, w2, v2 in fields(val):
                if n2 == 1 and w2 == 2 and isinstance(v2, bytes):
                    return v2.decode("utf-8", "replace")
    return ""


def parse_event(data: bytes) -> Tuple[Optional[float], Optional[int], List[Tuple[str, float]]]:
    """(wall_time, step, [(tag, value)]) of one Event: its scalar values only."""
    # proto3 leaves a zero out: an Event without a step field is at step 0
    wall, step, out = None, 0, []  # type: Optional[float], Optional[int], List[Tuple[str, float]]
    for num, wire, val in fields(data):
        if num == 1 and wire == 1 and isinstance(val, bytes):
            wall = struct.unpack("<d", val)[0]
        elif num == 2 and isinstance(val, int):
            step = _signed(val)
        elif num == 5 and wire == 2 and isinstance(val, bytes):
            for n2, w2, v2 in fields(val):
                if n2 == 1 and w2 == 2 and isinstance(v2, bytes):
                    item = _value(v2)
                    if item is not None:
                        out.append(item)
    return wall, step, out


def _value(buf: bytes) -> Optional[Tuple[str, float]]:
    tag, simple, tensor, plugin = "", None, None, ""  # type: str, Optional[float], Optional[bytes], str
    for num, wire, val in fields(buf):
        if not isinstance(val, bytes):
            continue  # a varint: no field of a Value
        if num == 1 and wire == 2:
            tag = val.decode("utf-8", "replace")
        elif num == 2 and wire == 5:
            simple = struct.unpack("<f", val)[0]
        elif num == 8 and wire == 2:
            tensor = val
        elif num == 9 and wire == 2:
            plugin = _plugin(val)
    if not tag:
        return None
    if simple is not None:
        return tag, float(simple)
    if tensor is not None and plugin in ("", "scalars"):
        v = _tensor_scalar(tensor)
        if v is not None:
            return tag, v
    return None


# ---- frames ---------------------------------------------------------------------------------
class FileState:
    """Where reading one event file stopped, and what went wrong in it."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset
        self.corrupt = False  # a length failed its CRC: nothing after it can be framed
        self.bad_records = 0  # frames skipped for a data CRC mismatch or an unparsable Event


Event = Tuple[Optional[float], Optional[int], List[Tuple[str, float]]]


def read_new(path: str, state: FileState, max_bytes: int = 16 << 20) -> List[Event]:
    """The complete events written to ``path`` since ``state.offset`` (which moves past them)."""
    if state.corrupt:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(state.offset)
            buf = f.read(max_bytes)
    except OSError:
        return []
    out = []  # type: List[Event]
    pos = 0
    while len(buf) - pos >= 12:
        header = buf[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", buf[pos + 8:pos + 12])
        if masked_crc(header) != hcrc:
            state.corrupt = True
            break
        end = pos + 12 + length + 4
        if end > len(buf):
            break  # torn tail (or a frame beyond this read): next time
        data = buf[pos + 12:pos + 12 + length]
        (dcrc,) = struct.unpack("<I", buf[end - 4:end])
        if masked_crc(data) == dcrc:
            try:
                out.append(parse_event(data))
            except (ValueError, IndexError, struct.error):
                state.bad_records += 1
        else:
            state.bad_records += 1
        pos = end
    state.offset += pos
    return out


def frame(data: bytes) -> bytes:
    """One TFRecord frame around ``data`` (tests and benchmarks write files with it)."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc(header)) + data + struct.pack("<I", masked_crc(data))


def scalars(path: str) -> Dict[str, List[Tuple[int, float]]]:
    """Every scalar of one file by tag: [(step, value)] in file order."""
    series = {}  # type: Dict[str, List[Tuple[int, float]]]
    state = FileState()
    while True:
        evs = read_new(path, state)
        if not evs:
            return series
        for _, step, vals in evs:
            for tag, v in vals:
                series.setdefault(tag, []).append((step or 0, v))
