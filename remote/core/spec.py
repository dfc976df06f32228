"""The job spec as the instance reads it (``spec.json``): typed once, every default stated here.

The laptop validates the job file (gpujob/config/spec.py, whose defaults come from this module
through ``bundle.import_remote``) and sends what the agent needs; ``submit`` adds what only the
instance side knows (project, host, host_env, price, node...). Everything on the instance reads
a job's spec through :class:`JobSpec`: a value of the wrong shape (a hand-edited spec.json, an
older laptop) becomes the default here, at the door, instead of an exception deep in a watcher.
"""

from typing import Any, Dict, List, Mapping, Optional, Union

# Defaults, stated once for both sides.
STOP_GRACE = 120.0  # s between SIGTERM and SIGKILL (stop, auto-stop, a move)
STOP_WAIT = 600.0  # s a ``stop`` waits for the job's processes to be gone before it says so
CHECKPOINT_KEEP = 3  # newest complete checkpoints kept by the rotation (0: all)
RETRY_ON = ("error", "oom", "signal")  # signal: one gpujob did not send
RETRY_BACKOFF = 10.0  # s before the first restart; doubles per attempt
LAUNCHER = "none"  # none | torchrun
STOP_MODE = "now"  # now | checkpoint
ON_OOM = "retry"  # retry | halve_batch
CURRENCY = "CNY"  # AutoDL bills in yuan


def _text(v: Any) -> Optional[str]:
    return v if isinstance(v, str) else None


def _number(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    try:
        return float(v)
    except ValueError:
        return None


def _table(v: Any) -> Dict[str, Any]:
    return dict(v) if isinstance(v, Mapping) else {}


def _strings(v: Any) -> Dict[str, str]:
    """An environment: str keys, values as text (a number written in YAML is still a value)."""
    return {str(k): str(x) for k, x in v.items() if x is not None} if isinstance(v, Mapping) else {}


def _list(v: Any) -> List[Any]:
    return list(v) if isinstance(v, (list, tuple)) else []


class Retry:
    """``retry:``: how often and on what a failed attempt starts again."""

    __slots__ = ("max_restarts", "on", "backoff", "on_oom", "move_after", "move_to")

    def __init__(self, doc: Any = None) -> None:
        d = _table(doc)
        n = _number(d.get("max_restarts"))
        self.max_restarts = int(n) if n is not None else 0
        self.on = [str(x) for x in _list(d.get("on"))] or list(RETRY_ON)  # type: List[str]
        b = _number(d.get("backoff"))
        self.backoff = b if b is not None else RETRY_BACKOFF
        self.on_oom = _text(d.get("on_oom")) or ON_OOM
        self.move_after = _number(d.get("move_after"))  # None: a lost job never moves by itself
        self.move_to = [str(x) for x in _list(d.get("move_to"))]  # type: List[str]


class JobSpec:
    """One job's spec, read once. ``doc`` keeps the document as written (what is saved back)."""

    def __init__(self, doc: Optional[Mapping[str, Any]] = None) -> None:
        d = dict(doc) if isinstance(doc, Mapping) else {}
        self.doc = d  # type: Dict[str, Any]
        self.name = _text(d.get("name")) or ""
        self.run = _text(d.get("run")) or ""
        self.job_id = _text(d.get("job_id"))
        self.project = _text(d.get("project"))
        self.host = _text(d.get("host"))
        # the environment: the host profile's settings, then the job's own env: (the job wins)
        self.host_env = _strings(d.get("host_env"))
        self.env = _strings(d.get("env"))
        self.secrets = [str(x) for x in _list(d.get("secrets"))]  # type: List[str]
        self.python = (_text(d.get("python")) or "").strip()  # "": the login shell's; venv; a path; x.y
        self.setup = _text(d.get("setup"))
        self.requirements = _text(d.get("requirements"))  # the file's name in the code folder
        self.data = [x for x in _list(d.get("data")) if isinstance(x, str)]  # destinations under <root>/data
        gpus = d.get("gpus")
        self.gpus = gpus if isinstance(gpus, (int, str)) and not isinstance(gpus, bool) else None  # type: Union[int, str, None]
        self.allocated = _text(d.get("allocated"))  # CUDA_VISIBLE_DEVICES the supervisor chose
        self.cpu_fallback = bool(d.get("cpu_fallback"))
        self.launcher = _text(d.get("launcher")) or LAUNCHER
        self.node = _table(d.get("node"))  # {rank, count, master_addr, master_port, rdzv_id} of a multi-node job
        self.nodes = [str(x) for x in _list(d.get("nodes"))]  # type: List[str]
        self.retry = Retry(d.get("retry"))
        grace = _number(d.get("stop_grace"))
        self.stop_grace = grace if grace is not None else STOP_GRACE
        self.stop_mode = _text(d.get("stop_mode")) or STOP_MODE
        self.stop_max_wait = _number(d.get("stop_max_wait"))  # None: twice the usual interval, else 20 min
        self.runtime_auto = d.get("runtime_auto") is not False
        keep = _number(d.get("checkpoint_keep"))
        self.checkpoint_keep = int(keep) if keep is not None else CHECKPOINT_KEEP
        self.checkpoint_dir = _text(d.get("checkpoint_dir"))
        self.checkpoint_pattern = _text(d.get("checkpoint_pattern"))
        self.checkpoint_mirror = _table(d.get("checkpoint_mirror"))
        self.checkpoint_backup = d.get("checkpoint_backup") is not False
        self.tensorboard_logdir = _text(d.get("tensorboard_logdir"))
        self.metrics = _table(d.get("metrics"))  # {patterns: [regex], total: {epochs|steps: N}}
        self.notify = _table(d.get("notify"))
        self.autostop = _table(d.get("autostop"))
        self.price_per_hour = _number(d.get("price_per_hour"))
        self.currency = _text(d.get("currency"))  # submit writes CURRENCY when the host names none
        self.shutdown_command = _text(d.get("shutdown_command"))

    @classmethod
    def of(cls, spec: "SpecLike") -> "JobSpec":
        """A JobSpec from a spec.json document (or the JobSpec itself): the one door in."""
        return spec if isinstance(spec, JobSpec) else cls(spec)

    @property
    def path_prefix(self) -> str:
        """``GPUJOB_PATH_PREFIX`` of the host profile: where nvidia-smi, python and conda are."""
        return self.host_env.get("GPUJOB_PATH_PREFIX", "")

    def with_values(self, **changes: Any) -> "JobSpec":
        """A copy with some keys of the document replaced (the attempt's GPUs, a provisioned env)."""
        return JobSpec(dict(self.doc, **changes))

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.doc)


SpecLike = Union[JobSpec, Mapping[str, Any], None]
