"""Printed lines of a training log that are no bar: JSON objects, plain prints (``step 120 loss: 0.5``,
``train loss 0.5``, ``Epoch 3/10``), public scripts' formats (``Train: 3 [ 4/10 ( 50%)]``, ``Test set: ...``),
and the job file's ``metrics.patterns``. :class:`LineReader` is a part of
:class:`~remote.metrics.logparse.LogParser`, whose ``_reset`` states the state it keeps.
"""

import json
from typing import Any, Dict, List, Optional

from remote.metrics.logpatterns import (
    BATCH,
    BATCHES,
    EPOCH,
    EPOCH_BATCH,
    EVAL_LINE,
    FRACTION,
    JSON_STEP,
    MEMO_MAX,
    METRIC_NAME,
    PAIR,
    PROGRESS_GROUPS,
    QUALIFIER,
    QUALIFIER_ENDS,
    QUALIFIER_LEN,
    SKIP_KEYS,
    SPACED,
    STEP,
    as_number,
)

_metric_keys = {}  # type: Dict[str, bool]


def is_metric(k: str) -> bool:
    """``k`` names a metric (METRIC_NAME, not SKIP_KEYS): asked for every pair of every line, answered once a key."""
    got = _metric_keys.get(k)
    if got is None:
        if len(_metric_keys) >= MEMO_MAX:
            _metric_keys.clear()
        got = _metric_keys[k] = METRIC_NAME.search(k) is not None and k not in SKIP_KEYS
    return got


def qualifier(s: str, end: int) -> Any:
    """``train``/``val``/... right before ``s[end:]``, spaces or ``_`` between (``train loss 2.1``, ``val_loss``):
    the word says whose the metric is. Looked for just before ``end``, not in all of the line before it."""
    j = end
    while j > 0 and (s[j - 1] == "_" or s[j - 1].isspace()):
        j -= 1
    if j == end or s[j - 1] not in QUALIFIER_ENDS:
        return None
    return QUALIFIER.search(s, max(0, j - QUALIFIER_LEN), j)  # \b sees the character before the window


class LineReader:
    """Records from printed lines; the step they carry, or the one the last bar or line gave."""

    def _json(self, s: str, t: float, out: List[Dict[str, Any]]) -> bool:
        """A JSON object printed on a line (``print(json.dumps({"step": 10, "loss": 0.53}))``)."""
        try:
            doc = json.loads(s)
        except ValueError:
            return False
        if not isinstance(doc, dict):
            return False
        rec = {}  # type: Dict[str, Any]
        for k, v in doc.items():
            if isinstance(v, str):
                v = as_number(v)  # "0.53" as transformers 5 formats it
            if isinstance(v, (int, float)) and not isinstance(v, bool) and len(k) <= 80:
                rec[JSON_STEP.get(k, k)] = v
        if "step" in rec and isinstance(rec["step"], (int, float)):
            rec["step"] = self.step = int(rec["step"])
        if not any(k not in ("step", "epoch", "max_steps") for k in rec):
            return bool(rec)
        self._flush_bar(out)
        self._add(rec, t, out)
        return True

    def _plain(self, s: str, low: str, t: float, out: List[Dict[str, Any]]) -> None:
        # Each pattern runs only where its literal part is in the line (``low``: the line in lower case):
        # a log flood (20,000 lines a second) is parsed here line by line, and a search over the whole
        # line for a pattern that cannot match was most of the supervisor's time.
        rec = {}  # type: Dict[str, Any]
        em = EVAL_LINE.match(s)
        whose = None if em is None else "eval" if em.group(1).lower() == "evaluation" else em.group(1).lower()
        if "%" in s:
            for m in FRACTION.finditer(s):
                rec[self._key(m.group(1), whose)] = float(m.group(2))
        s_rest = FRACTION.sub(" ", s) if rec else s
        ib = EPOCH_BATCH.match(s) if whose is None and low.startswith("train") else None
        sm = None if ib or ("step" not in low and "iter" not in low) else STEP.search(s)
        bm = None if sm or ib or "batch" not in low else BATCH.search(s) or BATCHES.search(s)
        pairs = PAIR.finditer(s_rest) if ":" in s_rest or "=" in s_rest else ()
        for m in list(pairs) or list(SPACED.finditer(s_rest)):
            k, v = m.group(1), m.group(2)
            if is_metric(k):
                x = as_number(v)
                if x is not None:
                    qm = qualifier(s_rest, m.start())
                    if whose is not None:
                        rec.setdefault(self._key(k, whose), x)  # "Loss: 0.7 (0.7)": the first is the value now
                    elif ib is not None:
                        rec.setdefault(k.lower(), x)
                    else:
                        rec[(qm.group(1) + "_" + k).lower() if qm else k] = x
        if not rec:
            return
        if ib:
            self._epoch_batch(int(ib.group(1)), int(ib.group(2)), int(ib.group(3)), rec, as_number(ib.group(4) or ""))
        elif whose is not None:
            pass  # an evaluation line is no step of training: it takes the current one (_add)
        elif sm or bm:
            m = sm or bm
            self._printed_step(s, int(m.group(1)), int(m.group(2)) if m.group(2) else None, rec, bm is not None, low)
        else:
            self._epoch_progress(s, rec)
        self._flush_bar(out)
        self._add(rec, t, out)

    @staticmethod
    def _key(k: str, whose: Optional[str]) -> str:
        k = k.lower().replace("average ", "")
        if whose is None or k.startswith(whose + "_"):
            return k
        return whose + "_" + k

    def _epoch_batch(self, epoch: int, n: int, of: int, rec: Dict[str, Any], pct: Optional[float] = None) -> None:
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

    def _taught(self, s: str, t: float, out: List[Dict[str, Any]]) -> bool:
        """The job file's ``metrics.patterns`` (named groups): a line one of them matches is read by them
        alone. ``step``, or ``epoch`` with ``batch``/``batches``, say where the run is; other groups are metrics."""
        got = {}  # type: Dict[str, str]
        for rx in self.patterns:
            m = rx.search(s)
            if m:
                got.update({k: v for k, v in m.groupdict().items() if v is not None})
        if not got:
            return False
        rec = {}  # type: Dict[str, Any]
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

    def _printed_step(self, s: str, n: int, of: Optional[int], rec: Dict[str, Any], batch: bool = False,
                      low: str = "") -> None:
        """``step N[/M]`` on a line; with an epoch beside it the count may start again each epoch
        (PyTorch's tutorial loop prints ``Epoch [2/10], Step [100/600]``): seen going back while the
        epoch went up, the step is counted on over the epochs before."""
        step, total = n, of
        em = EPOCH.search(s) if "epoch" in (low or s.lower()) else None
        if em:
            epoch, epochs = int(em.group(1)), int(em.group(2)) if em.group(2) else None
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

    def _epoch_progress(self, s: str, rec: Dict[str, Any]) -> None:
        """A line that names its epoch (``Epoch 3/10 - loss: 0.5``, or after an ``Epoch 3/10`` header)
        records it; where the log never shows a step (no bar, no ``step N``), the epoch is the only
        count of progress there is, so it stands for the step and its total for the total."""
        em = EPOCH.search(s)
        epoch, epochs = (int(em.group(1)), int(em.group(2)) if em.group(2) else None) if em else \
            (self.epoch_line or (None, None))
        if epoch is None:
            return
        if self.main_total is not None and self.epoch_bar_total is None and not self.bars_done and not epochs:
            # one bar counts every step of the run (accelerate's tqdm(range(max_train_steps))): a line's
            # "epoch 0: perplexity ..." reports an epoch that ended; kept, it read as the epoch under way
            # ("Epoch 2/3 ...", with its total, says where the run is)
            return
        if em:  # later lines without one (a logging line of the same epoch) belong to it
            self.epoch_line = (epoch, epochs or (self.epoch_line[1] if self.epoch_line else None))
        rec["epoch"] = epoch
        if self.epoch_base is None:
            self.epoch_base = min(epoch, 1)  # "Epoch 0/24" printed at its end: one epoch is done then
        if self.step is None and self.main_total is None:
            rec["step"] = epoch - self.epoch_base + 1
            if epochs:
                rec["max_steps"] = epochs
