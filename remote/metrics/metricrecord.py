"""A metrics record as the agent writes it (a line of ``metrics.*.jsonl``): ``t``, ``step`` (and
``epoch``, ``max_steps``) and each metric's value, every one a number; and the log's progress."""

from typing import Dict, Optional

MetricRecord = Dict[str, float]  # (an int, a step, is a float to the type checker too)
# The log's newest progress: step, total, rate (steps/s), eta_s, t; total and rate None when unknown.
Progress = Dict[str, Optional[float]]
