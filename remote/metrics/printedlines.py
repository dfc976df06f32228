"""Printed lines of a training log that are no bar: JSON objects, plain prints (``step 120 loss: 0.5``,
``train loss 0.5``, ``Epoch 3/10``), public scripts' formats (``Train: 3 [ 4/10 ( 50%)]``, ``Test set: ...``),
and the job file's ``metrics.patterns``. :class:`LineReader` is a part of
:class:`~remote.metrics.logparse.LogParser`, whose ``_reset`` states the state it keeps.
"""

import json
from typing import Dict, List, Optional, Tuple  # noqa: F401 (Dict: in a type comment)

from remote.metrics.lineshape import Shape, metric_key, pair_name
from remote.metrics.logpatterns import (
    FRACTION,
    JSON_STEP,
    PROGRESS_GROUPS,
    as_number,
)
from remote.metrics.logstate import LogState
from remote.metrics.metricrecord import MetricRecord


class LineReader(LogState):
    """Records from printed lines; the step they carry, or the one the last bar or line gave."""

    def _json(self, s: str, t: float, out: List[MetricRecord]) -> bool:
        """A JSON object printed on a line (``print(json.dumps({"step": 10, "loss": 0.53}))``)."""
        try:
            doc = json.loads(s)
        except ValueError:
            return False
        if not isinstance(doc, dict):
            return False
        rec: MetricRecord = {}
        for k, v in doc.items():
            if isinstance(v, str):
                v = as_number(v)  # "0.53" as transformers 5 formats it
            if isinstance(v, (int, float)) and not isinstance(v, bool) and len(k) <= 80:
                rec[JSON_STEP.get(k) or k] = v  # (mypy reads .get(k, k) of an Any key as str | None)
        if "step" in rec and isinstance(rec["step"], (int, float)):
            rec["step"] = self.step = int(rec["step"])
        if not any(k not in ("step", "epoch", "max_steps") for k in rec):
            return bool(rec)
        self._flush_bar(out)
        self._add(rec, t, out)
        return True

    def _plain(self, s: str, t: float, out: List[MetricRecord], sh: Shape) -> None:
        # Where the patterns match comes from the line's shape (lineshape: found once for all lines that differ
        # in their digits only); the names and numbers are read from the line itself. A log flood (20,000
        # lines a second, one format) is parsed here line by line.
        if not sh.pairs and not sh.fractions:
            return
        rec: MetricRecord = {}
        for ka, kb, va, vb in sh.fractions:
            rec[metric_key(s[ka:kb], sh.whose)] = float(s[va:vb])
        s_rest = FRACTION.sub(" ", s) if sh.fractions else s  # where the pairs' spans are
        for name, ka, kb, va, vb, qual in sh.pairs:
            if name is None:  # a name with digits ("f1", "top5_acc"): the line's own
                name = pair_name(s_rest[ka:kb], qual, sh)
                if name is None:
                    continue
            try:
                x = float(s_rest[va:vb])
            except ValueError:
                continue
            if sh.first_wins:
                rec.setdefault(name, x)  # "Loss: 0.7 (0.7)": the first is the value now
            else:
                rec[name] = x
        if not rec:
            return
        ep = None if sh.epoch is None else (int(s[sh.epoch[0]:sh.epoch[1]]),
                                            int(s[sh.epoch[2]:sh.epoch[3]]) if sh.epoch[2] >= 0 else None)
        ib = sh.train_batch
        if ib is not None:
            self._epoch_batch(int(s[ib[0]:ib[1]]), int(s[ib[2]:ib[3]]), int(s[ib[4]:ib[5]]), rec,
                              as_number(s[ib[6]:ib[7]]) if ib[6] >= 0 else None)
        elif sh.whose is not None:
            pass  # an evaluation line is no step of training: it takes the current one (_add)
        elif sh.counted is not None:
            a, b, c, d = sh.counted
            self._printed_step(int(s[a:b]), int(s[c:d]) if c >= 0 else None, rec, sh.count_is_batch, ep)
        else:
            self._epoch_progress(ep, rec)
        self._flush_bar(out)
        self._add(rec, t, out)

    def _epoch_batch(self, epoch: int, n: int, of: int, rec: MetricRecord, pct: Optional[float] = None) -> None:
        """``Train: E [b/B (p%)]``: b of B in epoch E (counted from the first epoch the log shows, 0 or 1).
        The image trainer prints the batch's 0-based index with the share done after it ((b+1)/B: its
        last line is ``[19/20 (100%)]``), MNIST the samples before it (b/B): the percentage says which."""
        if pct is not None and 0 <= n < of and abs(100.0 * (n + 1) / of - pct) < abs(100.0 * n / of - pct):
            n += 1
        if self.epoch_base is None:
            self.epoch_base = min(epoch, 1)
        rec["epoch"] = epoch
        rec["step"] = self.step = (epoch - self.epoch_base) * of + n
        if self.epochs_hint and of:
            rec["max_steps"] = self.epochs_hint * of

    def _taught(self, s: str, t: float, out: List[MetricRecord]) -> bool:
        """The job file's ``metrics.patterns`` (named groups): a line one of them matches is read by them
        alone. ``step``, or ``epoch`` with ``batch``/``batches``, say where the run is; other groups are metrics."""
        got = {}  # type: Dict[str, str]
        for rx in self.patterns:
            m = rx.search(s)
            if m:
                got.update({k: v for k, v in m.groupdict().items() if v is not None})
        if not got:
            return False
        rec: MetricRecord = {}
        for k, v in got.items():
            x = as_number(v)
            if x is not None and k not in PROGRESS_GROUPS:
                rec[k] = x
        num = {k: int(float(got[k])) for k in PROGRESS_GROUPS if k in got and as_number(got[k]) is not None}
        if "step" in num:
            rec["step"] = self.step = num["step"]
        elif "epoch" in num and "batch" in num and num.get("batches"):
            self._epoch_batch(num["epoch"], num["batch"], num["batches"], rec)
            rec.pop("max_steps", None)
        elif "epoch" in num:
            rec["epoch"] = num["epoch"]
        epochs = num.get("epochs") or self.epochs_hint
        if num.get("max_steps"):
            rec["max_steps"] = num["max_steps"]
        elif epochs and num.get("batches"):
            rec["max_steps"] = epochs * num["batches"]
        if any(k not in ("step", "epoch", "max_steps") for k in rec) or "step" in rec:
            self._flush_bar(out)
            self._add(rec, t, out)
        return True

    def _printed_step(self, n: int, of: Optional[int], rec: MetricRecord, batch: bool,
                      ep: Optional[Tuple[int, Optional[int]]]) -> None:
        """``step N[/M]`` on a line; with an epoch beside it the count may start again each epoch
        (PyTorch's tutorial loop prints ``Epoch [2/10], Step [100/600]``): seen going back while the
        epoch went up, the step is counted on over the epochs before."""
        step, total = n, of
        if ep is not None:  # the epoch printed on the line
            epoch, epochs = ep
            rec["epoch"] = epoch
            if batch:  # "| epoch 3 | 20/ 171 batches |": a later line without an epoch (a test) belongs to it
                self.epoch_line = (epoch, epochs)
            if self.epoch_base is None:
                self.epoch_base = min(epoch, 1)
            if batch:
                self.per_epoch = True  # "batch 30/100" counts within the epoch
            elif self.raw_step is not None and epoch > self.raw_step[0] and self.per_epoch is None:
                self.per_epoch = n < self.raw_step[1]
            self.raw_step = (epoch, n)
            if self.per_epoch and of:
                step = (epoch - self.epoch_base) * of + n
                epochs = epochs or self.epochs_hint
                total = epochs * of if epochs else None
        elif batch:
            return  # a batch count without its epoch says nothing of the run's progress
        rec["step"] = self.step = step
        if total:
            rec["max_steps"] = total

    def _epoch_progress(self, ep: Optional[Tuple[int, Optional[int]]], rec: MetricRecord) -> None:
        """A line that names its epoch (``Epoch 3/10 - loss: 0.5``, or after an ``Epoch 3/10`` header)
        records it; where the log never shows a step (no bar, no ``step N``), the epoch is the only
        count of progress there is, so it stands for the step and its total for the total."""
        epoch, epochs = ep or self.epoch_line or (None, None)
        if epoch is None:
            return
        if self.main_total is not None and self.epoch_bar_total is None and not self.bars_done and not epochs:
            # one bar counts every step of the run (accelerate's tqdm(range(max_train_steps))): a line's
            # "epoch 0: perplexity ..." reports an epoch that ended; kept, it read as the epoch under way
            # ("Epoch 2/3 ...", with its total, says where the run is)
            return
        if ep:  # later lines without one (a logging line of the same epoch) belong to it
            self.epoch_line = (epoch, epochs or (self.epoch_line[1] if self.epoch_line else None))
        rec["epoch"] = epoch
        if self.epoch_base is None:
            self.epoch_base = min(epoch, 1)  # "Epoch 0/24" printed at its end: one epoch is done then
        if self.step is None and self.main_total is None:
            rec["step"] = epoch - self.epoch_base + 1
            if epochs:
                rec["max_steps"] = epochs
