"""Progress bars in a training log: tqdm's (``42%|████▏     | 42/100 [00:10<00:14, 4.01it/s, loss=0.5]``) and
Lightning's rich one (``Epoch 1/9 ━━━ 8/8 0:00:01 • 0:00:00 6.1it/s v_num: 0 train_loss: 0.017``).

A bar's count (plus whole epochs before it) is the step; redraws between two ``feed`` calls become one
record, the newest (``_flush_bar``). :class:`BarReader` is a part of :class:`~remote.metrics.logparse.LogParser`,
whose ``_reset`` states the state it keeps.
"""

from typing import Any, Dict, List, Optional, Tuple  # noqa: F401 (Dict: in a type comment)

from remote.metrics.logpatterns import (
    BAR,
    EPOCH,
    EPOCHS_BAR,
    MEMO_MAX,
    NOT_PROGRESS,
    PAIR,
    PERCENT,
    RATE,
    RICH,
    SKIP_KEYS,
    STEP_UNITS,
    as_number,
)
from remote.metrics.logstate import LogState
from remote.metrics.metricrecord import MetricRecord

_bar_descs = {}  # type: Dict[str, Tuple[bool, Any, bool]]


def seconds(clock: str) -> Optional[float]:
    """``01:02:03`` / ``02:03`` / ``1d, 01:02:03`` → seconds."""
    clock = clock.strip()
    days = 0.0
    if "d," in clock:
        d, _, clock = clock.partition("d,")
        days = float(d.strip() or 0)
        clock = clock.strip()
    try:
        parts = [float(p) for p in clock.split(":")]
    except ValueError:
        return None
    secs = 0.0
    for p in parts:
        secs = secs * 60 + p
    return days * 86400 + secs


def plausible(rate_s: str, unit: str, secs: Optional[float], n: int, first: Optional[Tuple[int, float]] = None) -> bool:
    """A bar's rate that could be true: a resumed HF Trainer's bar jumps to the resumed step at once
    (``update(1800)``), and tqdm then shows ``16899.26it/s`` for many redraws; ten times more steps than
    the bar has counted over its elapsed time is that jump, not speed (the records' pace is used).
    ``first``: (count, elapsed) where this bar was first seen; the steps since then are what it counted
    since (a jump to step 140 of 240 made 752 it/s over 1 s look possible: 150 steps were counted)."""
    rate = as_number(rate_s)
    if rate is None or not secs:
        return True  # "00:00" is anything under a second: no judging
    per_s = 1.0 / rate if unit.startswith("s/") and rate > 0 else rate
    if first is not None and secs > first[1] and per_s * (secs - first[1]) > 10 * (n - first[0]) + 10:
        return False
    return per_s * secs <= 10 * n + 10  # 10: a first compile's slow steps, then the real pace, is no jump


def bar_desc(desc: str) -> Tuple[bool, Any, bool]:
    """(not progress, its epoch match, an outer epochs bar) of a bar's description: every redraw has the same."""
    got = _bar_descs.get(desc)
    if got is None:
        if len(_bar_descs) >= MEMO_MAX:
            _bar_descs.clear()
        skip = bool(desc) and NOT_PROGRESS.search(desc) is not None
        em = EPOCH.search(desc) if desc and not skip else None
        got = _bar_descs[desc] = (skip, em, bool(desc) and em is None and not skip and EPOCHS_BAR.search(desc) is not None)
    return got


class BarReader(LogState):
    """The bars of a log: where each is, what it says of the run's progress, and the record it becomes."""

    def _bar(self, s: str, t: float) -> int:
        """Where the bar in ``s`` ends (-1: no bar)."""
        m = BAR.search(s)
        if not m:
            return -1
        n, total_s, _elapsed, _left, rest = m.groups()
        if not rest or ("/s" not in rest and "s/" not in rest):
            return -1
        rm = RATE.search(rest)
        if not rm:
            return -1
        unit = rm.group(2)
        if (unit[2:] if unit.startswith("s/") else unit[:-2]).lower() not in STEP_UNITS:
            return m.end()  # datasets' "examples/s", downloads' "MB/s": not training steps
        desc = s[:m.start()]
        desc = PERCENT.sub("", desc.split("%|")[0]) if "%|" in desc else desc  # "Epoch:  30%|": not epoch 30
        skip, em, outer = bar_desc(desc)
        if skip:
            return m.end()
        total = int(total_s) if total_s and total_s != "?" else None
        secs = seconds(_elapsed) if _elapsed else None
        seen = self.bar_seen.get(total)
        if seen is None or int(n) < seen[0] or (secs is not None and secs < seen[1]):  # a new bar, or a new pass
            seen = self.bar_seen[total] = (int(n), secs or 0.0)
        rate_s = rm.group(1) if plausible(rm.group(1), unit, secs, int(n), seen) else "?"
        self._progress(int(n), total, em, t, (rate_s, unit, rest[rm.end():]), epochs_bar=outer)
        return m.end()

    def _rich(self, s: str, t: float) -> bool:
        m = RICH.match(s)
        if not m or NOT_PROGRESS.search(m.group("desc")):
            return bool(m)
        rate = (m.group("rate"), m.group("unit"), m.group("rest"))
        self._progress(int(m.group("n")), int(m.group("total")), EPOCH.search(m.group("desc")), t, rate, rich=True)
        return True

    def _progress(self, n: int, total: Optional[int], em: Any, t: float, rate: Tuple[str, str, str],
                  rich: bool = False, epochs_bar: bool = False) -> None:
        """``rate``: the bar's rate, its unit (``it/s``, ``s/it``) and the postfix after it.
        ``epochs_bar``: an outer ``trange(E, desc="Epochs")``: its total is the number of epochs."""
        if epochs_bar and total:
            self.epoch_bar_total = total
            if self.main_total is not None and total != self.main_total:
                return  # it counts the epochs; the inner bar counts the steps
        if n == 0:
            return  # a bar not started yet (or Lightning's reset before the next epoch) tells nothing
        if self.main_total is not None and total != self.main_total:
            return  # another bar (HF's evaluation bar has no description): not the training's
        epoch = epochs = None
        base = 0
        if em:
            epoch = int(em.group(1))
            if em.group(2) is None or rich:
                epochs = int(em.group(2)) + 1 if em.group(2) else None  # Lightning counts epochs from 0
            else:  # a script's own "epoch 2/10": counted from wherever its first one started
                if self.epoch_base is None:
                    self.epoch_base = min(epoch, 1)
                base = self.epoch_base
                epochs = int(em.group(2))
        elif self.main_total is not None and total == self.main_total and n < self.main_n:
            self.bars_done += 1  # a new bar of the same length: the next pass over the data
        self.main_total, self.main_n = total, n
        before = epoch - base if epoch is not None else self.bars_done
        step = n + before * total if total else n
        outer = self.epoch_bar_total if self.epoch_bar_total != total else None  # another bar counts epochs
        multi = em is not None or self.bars_done > 0 or outer is not None
        epochs = epochs or self.epochs_hint or outer
        grand = None  # type: Optional[int]
        if total and multi and epochs:
            grand = epochs * total
        elif total and not multi:
            grand = total
        self.step = step
        # the rate and the postfix are read only for the bar that becomes a record (_flush_bar):
        # most redraws are overwritten by the next one before anyone looks
        self.bar_pending = (t, step, grand) + rate

    def _flush_bar(self, out: List[MetricRecord]) -> None:
        """The newest bar becomes a record (before any record printed after it: the file stays in order)."""
        if self.bar_pending is None:
            return
        t, step, grand, rate_s, unit, post = self.bar_pending
        self.bar_pending = None
        rate = as_number(rate_s) if rate_s != "?" else None
        if rate is not None and unit.startswith("s/"):
            rate = 1.0 / rate if rate > 0 else None
        self.progress = {"step": step, "total": grand, "rate": rate, "t": t}
        if grand and rate:
            self.progress["eta_s"] = round(max(0.0, grand - step) / rate, 1)
        rec: MetricRecord = {"t": t, "step": step}
        if grand:
            rec["max_steps"] = grand
        for k, v in PAIR.findall(post):
            if k not in SKIP_KEYS:
                x = as_number(v)
                if x is not None:
                    rec[k] = x
        out.append(rec)
