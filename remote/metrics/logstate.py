"""The state one log's reading keeps, shared by the parts of :class:`~remote.metrics.logparse.LogParser`
(:class:`~remote.metrics.progressbars.BarReader`, :class:`~remote.metrics.printedlines.LineReader`): each part
reads what the others set. ``LogParser.__init__`` and ``_reset`` give the values; this names their types."""

import re  # noqa: F401 (in an annotation)
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from remote.metrics.metricrecord import MetricRecord, Progress

Pending = Tuple[float, int, Optional[int], str, str, str]  # a bar not read in full yet: t, step, total, rate, unit, postfix


class LogState:
    epochs_hint: Optional[int]  # total epochs from the job, if known
    patterns: "List[re.Pattern[str]]"  # the job file's metrics.patterns, compiled
    progress: Progress
    epoch_base: Optional[int]  # the script counts epochs from 0 or 1
    main_total: Optional[int]
    main_n: int
    bars_done: int
    bar_seen: Dict[Optional[int], Tuple[int, float]]
    step: Optional[int]
    bar_pending: Optional[Pending]
    epoch_bar_total: Optional[int]
    epoch_line: Optional[Tuple[int, Optional[int]]]
    raw_step: Optional[Tuple[int, int]]
    per_epoch: Optional[bool]

    if TYPE_CHECKING:  # one part's records, written by another (BarReader, LogParser)
        def _flush_bar(self, out: List[MetricRecord]) -> None: ...

        def _add(self, rec: MetricRecord, t: float, out: List[MetricRecord]) -> None: ...
