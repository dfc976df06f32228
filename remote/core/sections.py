"""The spec's mapping sections the agent acts on: ``autostop:``, ``checkpoint.mirror``, ``notify:``
(standard library only, Python 3.8+). Each is read once, at the door (remote/core/spec.py's
JobSpec): durations and sizes parsed, every default stated here; a value of the wrong shape turns
its policy off instead of failing in a watcher. Their checks with messages for the job file live
beside the code that acts on them (remote/run/autostop.py, remote/mirror/config.py, remote/notify).
"""

from typing import Any, Dict, List, Mapping, Optional, Union

from remote.core.protocol import parse_duration, parse_size
from remote.core.specfields import items, number, table, text

# autostop: the policies (a key present turns its watcher on), then how the job ends.
AUTOSTOP_POLICIES = ["max_runtime", "budget", "gpu_idle", "stall", "nan_loss", "plateau", "disk_free_below"]
AUTOSTOP_KEYS = AUTOSTOP_POLICIES + ["after", "pull_before_shutdown", "check_every"]
GPU_IDLE_BELOW = 5  # % of utilisation, as the job file writes it
GPU_IDLE_FOR = "30m"
PLATEAU_MODE = "min"
PLATEAU_PATIENCE = 5  # evaluations
PLATEAU_MIN_DELTA = 0.0
AFTER = "none"  # none | shutdown
PULL_WAIT = 1800.0  # s ``pull_before_shutdown: true`` waits for a pull
# checkpoint.mirror: how long ``after: shutdown`` waits for it, how long it fails before a notification.
MIRROR_WAIT = 1800.0
MIRROR_ALERT = 600.0


def duration_or_none(v: Any) -> Optional[float]:
    """Seconds of ``v``, None when it is absent or no duration."""
    try:
        return None if v is None else parse_duration(v)
    except ValueError:
        return None


def _size_or_none(v: Any) -> Optional[int]:
    try:
        return None if v is None else parse_size(v)
    except ValueError:
        return None


class GpuIdle:
    """``gpu_idle: {below: 5, for: 30m}``; ``said`` keeps the two values as written (the reason quotes them)."""

    __slots__ = ("below", "window", "said")

    def __init__(self, d: Mapping[str, Any]) -> None:
        below, window = d.get("below", GPU_IDLE_BELOW), d.get("for", GPU_IDLE_FOR)
        n = number(below)
        self.below = n if n is not None else float(GPU_IDLE_BELOW)
        self.window = duration_or_none(window) or parse_duration(GPU_IDLE_FOR)
        self.said = (below, window)


class Plateau:
    """``plateau: {metric: eval_loss, mode: min, patience: 5, min_delta: 0.001}``."""

    __slots__ = ("metric", "mode", "patience", "min_delta")

    def __init__(self, metric: str, d: Mapping[str, Any]) -> None:
        self.metric = metric
        self.mode = text(d.get("mode")) or PLATEAU_MODE  # min | max
        n, delta = number(d.get("patience")), number(d.get("min_delta"))
        self.patience = int(n) if n is not None else PLATEAU_PATIENCE
        self.min_delta = delta if delta is not None else PLATEAU_MIN_DELTA


class Autostop:
    """``autostop:``: each policy parsed once (None: off); ``said`` holds the values as the job file
    wrote them, which the stop reasons quote."""

    def __init__(self, doc: Any = None) -> None:
        d = table(doc)
        self.said: Dict[str, Any] = d
        self.max_runtime = duration_or_none(d.get("max_runtime"))
        self.budget = number(d.get("budget"))
        gi, pl = d.get("gpu_idle"), d.get("plateau")
        self.gpu_idle = GpuIdle(gi) if isinstance(gi, Mapping) and gi else None
        self.stall = duration_or_none(d.get("stall"))
        self.nan_loss = bool(d.get("nan_loss"))
        metric = text(pl.get("metric")) if isinstance(pl, Mapping) else None
        self.plateau = Plateau(metric, pl) if metric and isinstance(pl, Mapping) else None
        self.disk_free_below = _size_or_none(d.get("disk_free_below"))
        self.after = text(d.get("after")) or AFTER
        pull = d.get("pull_before_shutdown")
        self.pull_wait = PULL_WAIT if pull is True else 0.0 if pull is None or pull is False \
            else duration_or_none(pull) or 0.0  # s to wait for a pull before powering off
        self.check_every = duration_or_none(d.get("check_every"))  # None: the agent's usual interval

    @property
    def active(self) -> bool:
        """A policy is named (its watcher runs, even one written ``nan_loss: false``)."""
        return any(k in self.said for k in AUTOSTOP_POLICIES)

    @property
    def shutdown(self) -> bool:
        return self.after == "shutdown"


class Mirror:
    """``checkpoint.mirror`` in the normalised form the laptop sends (remote/mirror/config.py)."""

    def __init__(self, doc: Any, keep: int) -> None:
        d = table(doc)
        self.targets: List[str] = [t for t in items(d.get("targets")) if isinstance(t, str)]
        self.endpoint, self.provider = text(d.get("endpoint")), text(d.get("provider"))
        self.region, self.bwlimit = text(d.get("region")), text(d.get("bwlimit"))
        n = number(d.get("keep"))
        self.keep = int(n) if n else keep  # checkpoints kept on each target
        wait, alert = number(d.get("wait")), number(d.get("alert_after"))
        self.wait = wait if wait is not None else MIRROR_WAIT
        self.alert_after = alert if alert is not None else MIRROR_ALERT

    @classmethod
    def of(cls, cfg: "MirrorLike", keep: int) -> "Mirror":
        return cfg if isinstance(cfg, Mirror) else cls(cfg, keep)


MirrorLike = Union[Mirror, Mapping[str, Any], None]


class Notify:
    """``notify:`` as sent (literal secrets already replaced by ``${NAME}``): ``doc`` is what
    remote/notify's calls take; ``enabled`` when it names a channel."""

    def __init__(self, doc: Any = None) -> None:
        self.doc: Dict[str, Any] = table(doc)
        self.enabled = bool(items(self.doc.get("channels")))
        self.channels: List[Dict[str, Any]] = [c for c in items(self.doc.get("channels")) if isinstance(c, dict)]
