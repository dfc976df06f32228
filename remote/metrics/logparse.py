"""Metrics and progress from what a training script prints, for scripts that never call gpujob.

Fed the new bytes of ``output.log`` (stdout and stderr together), a ``LogParser`` splits them at
``\\n`` and at ``\\r`` (tqdm redraws a bar in place with ``\\r``) and recognises:

- Hugging Face ``Trainer`` dict lines, ``{'loss': '4.03', 'grad_norm': '0.865', ...}``
  (transformers 5 prints the values as strings, 4.x as numbers), ``eval_*`` dicts included;
- tqdm bars, ``42%|████▏     | 42/100 [00:10<00:14, 4.01it/s, loss=0.5]`` (also ``s/it``, and
  ``42it [00:10, 4.01it/s]`` without a total), with a description such as Lightning's
  ``Epoch 3:`` and a postfix of ``key=value`` metrics; Lightning's rich bar line
  ``Epoch 1/9 ━━━ 8/8 0:00:01 • 0:00:00 6.1it/s v_num: 0 train_loss: 0.017``;
- JSON objects printed one a line, ``{"step": 120, "loss": 0.5}``;
- plain prints: ``step 120`` / ``step 120/1000``, ``loss: 0.5``, ``loss=0.5``, ``val_acc=0.9``,
  ``train loss 0.5`` (→ ``train_loss``), ``Epoch 3/10`` (the step of a loop that counts only epochs);
- public scripts' lines: ``Train: 3 [ 4/10 ( 50%)]`` (image trainer), ``Train Epoch: 1 [640/60000 (1%)]``
  and ``Test set: ... Accuracy: 450/500 (90%)`` (MNIST), ``| epoch 3 | 20/ 171 batches |``
  (word-language-model), ``iter 230: loss 0.91`` (GPT trainer); evaluation lines give ``test_*`` /
  ``eval_*`` / ``val_*``, config echoes (``Overriding: x = 1``) nothing;
- the job file's ``metrics.patterns`` (named groups), tried first.

A record gets a step only where one is printed: the bar's count (plus whole epochs before it)
or a ``step N`` on the same line. Validation, test, sanity-check and data-preparation bars (``Map``, ``Downloading``, ``Loading
checkpoint shards``; units other than iterations, steps or batches) are not progress.
Bar redraws between two ``feed`` calls become one record (the newest), so a bar redrawn ten
times a second does not become ten records a second.

Here: the input (lines, segments, attempt markers, dict lines) and the state one log's reading keeps;
the patterns are in ``logpatterns``, bars in ``progressbars``, the other printed lines in ``printedlines``.
"""

import re
from typing import Any, Dict, List, Optional, Tuple  # noqa: F401 (in type comments)

from remote.core.jsontypes import JSONObject
from remote.metrics.lineshape import BLIND, UNKNOWN, remember, routes, shape_of
from remote.metrics.logpatterns import (
    ANSI,
    CONFIG_ECHO,
    DICT_PAIR,
    ECHO_METRIC,
    EPOCH_HEADER,
    MARKER,
    MAX_LINE,
    MAX_PENDING,
    as_number,
)
from remote.metrics.logstate import Pending  # noqa: F401 (in a type comment)
from remote.metrics.metricrecord import MetricRecord, Progress
from remote.metrics.printedlines import LineReader
from remote.metrics.progressbars import BarReader


class LogParser(BarReader, LineReader):
    """Incremental: ``feed(new_bytes, t)`` returns the records those bytes complete."""

    def __init__(self, epochs: Optional[int] = None, patterns: Optional[List[str]] = None) -> None:
        self.pending = b""
        self.epochs_hint = epochs  # total epochs from the job (run-command flags, env), if known
        self.patterns = []  # type: List[Any]  # the job file's metrics.patterns, compiled
        for rx in patterns or []:
            try:
                self.patterns.append(re.compile(rx))
            except re.error:
                continue  # the laptop checked them; an agent's older Python may still refuse one
        self.progress: Progress = {}
        # whether the script counts epochs from 0 or 1, from the first epoch the log shows: the script's
        # habit, so it outlives an attempt (a resumed run's first line, "Train: 7 [...]", tells nothing)
        self.epoch_base = None  # type: Optional[int]
        self._reset()

    def _reset(self) -> None:
        self.main_total = None  # type: Optional[int]
        self.main_n = 0
        self.bars_done = 0  # finished main bars without an epoch in their description
        self.bar_seen = {}  # type: Dict[Optional[int], Tuple[int, float]]  # per bar total: (count, elapsed) first seen
        self.step = None  # type: Optional[int]
        self.bar_pending = None  # type: Optional[Pending]
        self.epoch_bar_total = None  # type: Optional[int]  # the total of an outer "Epochs" bar
        self.epoch_line = None  # type: Optional[Tuple[int, Optional[int]]]  # the last epoch printed, of how many
        self.raw_step = None  # type: Optional[Tuple[int, int]]  # (epoch, step as printed) of the last such line
        self.per_epoch = None  # type: Optional[bool]  # the printed step starts again each epoch ("Epoch [2/10], Step [100/600]")

    # ---- context kept between readers -------------------------------------------------------
    def carry(self) -> JSONObject:
        """What a later reader of the same log needs of this one (the Collector's state keeps it; status
        parses the lines the Collector has not read yet with it): the epoch base, where bars were first seen."""
        return {"epoch_base": self.epoch_base, "bars": [[k, n, s] for k, (n, s) in self.bar_seen.items()]}

    def carried(self, doc: Any) -> None:
        """Take what ``carry`` gave (from a file: anything of the wrong shape is dropped)."""
        if not isinstance(doc, dict):
            return
        base = doc.get("epoch_base")
        if isinstance(base, int) and not isinstance(base, bool) and base in (0, 1):
            self.epoch_base = base
        bars = doc.get("bars")
        for b in bars if isinstance(bars, list) else []:
            if isinstance(b, list) and len(b) == 3 and (b[0] is None or isinstance(b[0], int)) and \
                    isinstance(b[1], int) and isinstance(b[2], (int, float)):
                self.bar_seen[b[0]] = (b[1], float(b[2]))

    # ---- input ---------------------------------------------------------------------------
    def feed(self, data: bytes, t: float) -> List[MetricRecord]:
        buf = self.pending + data
        cut = max(buf.rfind(b"\n"), buf.rfind(b"\r"))
        if cut < 0:
            self.pending = buf if len(buf) <= MAX_PENDING else b""
            return []
        self.pending = buf[cut + 1:]
        if len(self.pending) > MAX_PENDING:
            self.pending = b""
        out = []  # type: List[MetricRecord]
        text = buf[:cut].decode("utf-8", "replace")
        # the same text with every digit 0, character for character: a printed line's shape (lineshape)
        blind = buf[:cut].translate(BLIND).decode("utf-8", "replace").split("\n")
        known = routes if not self.patterns else {}  # (a job's own patterns may name digits: no route)
        for i, line in enumerate(text.split("\n")):
            if "\r" in line:
                for seg, bseg in zip(line.split("\r"), blind[i].split("\r")):
                    if seg and len(seg) <= MAX_LINE:
                        self._routed(seg, t, out, bseg)
            elif line and len(line) <= MAX_LINE:  # (_routed, inline: a flood's every line comes here)
                sh = known.get(blind[i], UNKNOWN)
                if sh is UNKNOWN:
                    self._segment(line, t, out, blind[i])
                elif sh is not None:
                    self._plain(line.strip(), t, out, sh)
        self._flush_bar(out)
        return out

    def _routed(self, seg: str, t: float, out: List[MetricRecord], blind: str) -> None:
        """A line read the way the last line of its shape was, where that way did not depend on its digits
        (``routes``: most lines of a flood skip every test _segment makes before the plain prints' patterns)."""
        sh = routes.get(blind, UNKNOWN) if not self.patterns else UNKNOWN
        if sh is UNKNOWN:
            self._segment(seg, t, out, blind)
        elif sh is not None:
            self._plain(seg.strip(), t, out, sh)

    def _segment(self, seg: str, t: float, out: List[MetricRecord], blind: Optional[str] = None) -> None:
        key = blind  # the line's shape, as _routed looks it up
        if "\x1b" in seg:
            seg = ANSI.sub("", seg)
            blind = key = None if blind is None else ANSI.sub("", blind)  # the same spans: ANSI tells no digit apart
        s = seg.strip()
        if not s:
            return
        if s.startswith(MARKER):
            self._flush_bar(out)
            self._reset()
            return
        if s[0] == "{" and '":' in s and s[-1] == "}" and self._json(s, t, out):
            return
        if s[0] == "{" and "':" in s:
            rec = {k: v for k, v in ((k, as_number(v)) for k, v in DICT_PAIR.findall(s)) if v is not None}
            if rec:
                self._flush_bar(out)
                self._add(rec, t, out)
            return
        if "/s" in s or "s/" in s:
            if "[" in s or "•" in s:
                key = None  # a bar: its numbers say whether it is one
            end = self._bar(s, t) if "[" in s else -1
            if end >= 0:
                if s[end:].strip():  # a print that followed the bar on the same line
                    self._segment(s[end:], t, out)  # (its shape is its own: a rare line)
                return
            if "•" in s and self._rich(s, t):
                return
        if self.patterns and self._taught(s, t, out):
            return
        if s[0] == "{" or self.patterns:
            key = None  # JSON that did not parse may with other digits ("01"); a user's pattern may name digits
        low = s.lower()
        if "=" in s and CONFIG_ECHO.match(s) and not ECHO_METRIC.match(s.split("=")[0].strip()):
            remember(key, None)
            return
        hm = EPOCH_HEADER.match(s)
        if hm:
            self.epoch_line = (int(hm.group(1)), int(hm.group(2)))
            return
        if "loss" in low or "step" in low or "iter" in low or "acc" in low or "lr" in low:
            sh = shape_of(s if blind is None else blind.strip())
            remember(key, sh)
            self._plain(s, t, out, sh)
        else:
            remember(key, None)

    # ---- records ------------------------------------------------------------------------
    def _add(self, rec: MetricRecord, t: float, out: List[MetricRecord]) -> None:
        if "step" not in rec and self.step is not None:
            rec["step"] = self.step  # the bar's count when the line was printed
        rec["t"] = t
        out.append(rec)

