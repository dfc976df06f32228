"""Kept for the supervisor's heartbeat, which still imports ``index_log_size`` from here; the log's
size index by time now lives in remote/jobs/logindex.py (drop this module once the supervisor
imports it from there). The rest of what this module held: remote/view/watch.py (the ``watch``
document) and remote/view/tensorboard.py (a job's TensorBoard)."""

from remote.jobs.logindex import index_log_size  # noqa: F401
