"""`gpujob data check FILE.jsonl`: find data problems on the laptop, before uploading.

Reports lines that do not parse, missing fields, empty texts, exact duplicates, label counts,
text length statistics (characters) and a token estimate (about 4 characters per token).
Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from gpujob.errors import GpujobError

CHARS_PER_TOKEN = 4


@dataclass
class DataReport:
    """What check_jsonl found. Line numbers start at 1; lists hold every offending line."""

    path: str
    text_field: str
    label_field: str | None
    lines: int = 0                      # non-blank lines
    records: int = 0                    # lines that parsed as JSON objects
    blank_lines: list[int] = field(default_factory=list)
    bad_json: list[tuple[int, str]] = field(default_factory=list)    # (line, error)
    not_object: list[int] = field(default_factory=list)
    missing_text: list[int] = field(default_factory=list)
    non_string_text: list[int] = field(default_factory=list)
    empty_text: list[int] = field(default_factory=list)
    missing_label: list[int] = field(default_factory=list)
    duplicates: list[tuple[int, int]] = field(default_factory=list)  # (line, first line with the same record)
    label_counts: dict[str, int] = field(default_factory=dict)
    lengths: dict[str, float] = field(default_factory=dict)          # min, p50, p90, p99, max, mean
    total_chars: int = 0
    token_estimate: int = 0

    @property
    def errors(self) -> int:
        """Lines a training script would fail on or learn nothing from."""
        return (len(self.bad_json) + len(self.not_object) + len(self.missing_text) + len(self.non_string_text)
                + len(self.empty_text) + len(self.missing_label))

    @property
    def ok(self) -> bool:
        return self.errors == 0 and self.records > 0

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d.update(errors=self.errors, ok=self.ok)
        return d


def _percentile(sorted_vals: list[int], q: float) -> float:
    if not sorted_vals:
        return 0.0
    k = (len(sorted_vals) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


def _open(path: Path | str) -> BinaryIO:
    """``path`` opened for reading; a missing file, a folder or no permission is a ``GpujobError``."""
    try:
        if Path(path).is_dir():
            raise IsADirectoryError(21, "is a folder, not a jsonl file", str(path))
        return open(path, "rb")
    except OSError as e:
        what = "does not exist" if isinstance(e, FileNotFoundError) else e.strerror or str(e)
        raise GpujobError(f"cannot check {path}: {what}", "give the path of a .jsonl file (one JSON object per line)") from None


def check_jsonl(path: Path | str, text_field: str = "text", label_field: str | None = None) -> DataReport:
    """Read ``path`` line by line (any size) and report its problems and statistics."""
    rep = DataReport(path=str(path), text_field=text_field, label_field=label_field)
    seen: dict[bytes, int] = {}
    lengths: list[int] = []
    labels: Counter[str] = Counter()
    with _open(path) as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                rep.blank_lines.append(n)
                continue
            rep.lines += 1
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                rep.bad_json.append((n, f"not UTF-8 at byte {e.start}"))
                continue
            except json.JSONDecodeError as e:
                rep.bad_json.append((n, f"{e.msg} at column {e.colno}"))
                continue
            except RecursionError:
                rep.bad_json.append((n, "nested too deeply"))
                continue
            if not isinstance(obj, dict):
                rep.not_object.append(n)
                continue
            rep.records += 1
            digest = hashlib.blake2b(json.dumps(obj, sort_keys=True).encode(), digest_size=16).digest()
            if digest in seen:
                rep.duplicates.append((n, seen[digest]))
            else:
                seen[digest] = n
            if label_field is not None:
                if label_field not in obj or obj[label_field] is None:
                    rep.missing_label.append(n)
                else:
                    labels[json.dumps(obj[label_field], ensure_ascii=False).strip('"')] += 1
            if text_field not in obj:
                rep.missing_text.append(n)
                continue
            text = obj[text_field]
            if not isinstance(text, str):
                rep.non_string_text.append(n)
                continue
            if not text.strip():
                rep.empty_text.append(n)
            lengths.append(len(text))
    lengths.sort()
    rep.label_counts = dict(labels.most_common())
    rep.total_chars = sum(lengths)
    rep.token_estimate = rep.total_chars // CHARS_PER_TOKEN
    if lengths:
        rep.lengths = {"min": lengths[0], "p50": _percentile(lengths, 0.5), "p90": _percentile(lengths, 0.9),
                       "p99": _percentile(lengths, 0.99), "max": lengths[-1], "mean": rep.total_chars / len(lengths)}
    return rep

