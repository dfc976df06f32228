"""The job spec as the instance reads it (``spec.json``): typed once, every default stated here.

The laptop validates the job file (gpujob/config/spec.py, whose defaults come from this module
through ``bundle.import_remote``) and sends what the agent needs; ``submit`` adds what only the
instance side knows (project, host, host_env, price, node...). Everything on the instance reads
a job's spec through :class:`JobSpec`: a value of the wrong shape (a hand-edited spec.json, an
older laptop) becomes the default here, at the door, instead of an exception deep in a watcher.
"""

from typing import Any, Dict, List, Mapping, Optional, Union

from remote.core.sections import Autostop, Mirror, Notify
from remote.core.specfields import (
    BOOL,
    CHOICE,
    CHOICES,
    DURATION,
    INT,
    TABLE,
    TEXT,
    TEXTS,
    Field,
    Section,
    items,
    number,
    strings,
    table,
    text,
)

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
# What the job file may say (docs/job-spec.md says the same), in the order an error names them.
RETRY_CAUSES = ("error", "oom", "nan", "nccl", "signal")
ON_OOM_CHOICES = ("retry", "halve_batch")
STOP_MODES = ("now", "checkpoint")
LAUNCHERS = ("torchrun", "none")
MAX_RESTARTS = 1000
MAX_KEEP = 1000
MAX_DURATION = 30 * 86400.0  # s: a duration of the job file (grace, backoff, a move's wait)

# The sections of the job file whose keys are plain values, declared once: the agent reads spec.json
# with them (below), the laptop checks a job file by walking them (gpujob/config/spec.py).
RETRY = Section("retry", "{max_restarts, on, backoff, on_oom}", [
    Field("move_after", "move_after", DURATION, None, high=MAX_DURATION,  # None: a lost job never moves by itself
          zero="0s would move a job at its first silence: give a duration such as 20m (leave the key out for no "
               "automatic move)"),
    Field("move_to", "move_to", TEXTS),  # where a lost job moves (the laptop's default: the job's host: list)
    Field("max_restarts", "max_restarts", INT, 0, "a number of restarts", 0, MAX_RESTARTS),
    Field("on", "on", CHOICES, RETRY_ON, "cause", choices=RETRY_CAUSES),
    Field("backoff", "backoff", DURATION, RETRY_BACKOFF, high=MAX_DURATION),
    Field("on_oom", "on_oom", CHOICE, ON_OOM, choices=ON_OOM_CHOICES),
])
STOP = Section("stop", "{{grace: {:g}s}}".format(STOP_GRACE), [
    Field("grace", "stop_grace", DURATION, STOP_GRACE, high=MAX_DURATION),
    Field("mode", "stop_mode", CHOICE, STOP_MODE, choices=STOP_MODES),  # checkpoint: wait for the next one first
    Field("max_wait", "stop_max_wait", DURATION, None, high=MAX_DURATION),  # None: twice the usual interval, else 20 min
])
CHECKPOINT = Section("checkpoint", "{keep: N}", [
    Field("backup", "checkpoint_backup", BOOL, True, "true or false (a copy of a checkpoint file the script "
          "overwrites in place, such as ckpt.pt, restored when a save is cut short)"),
    Field("dir", "checkpoint_dir", TEXT, None, "a folder"),  # absolute: shared storage; relative: in the code
    Field("pattern", "checkpoint_pattern", TEXT, None, "a glob such as '*.pt'"),  # under the checkpoint folder
    # 0: gpujob deletes none (a script that rotates its own: timm's --checkpoint-hist, HF's save_total_limit)
    Field("keep", "checkpoint_keep", INT, CHECKPOINT_KEEP, "a number of checkpoints (0: gpujob deletes none)",
          0, MAX_KEEP),
    Field("mirror", "checkpoint_mirror", TABLE),  # checked by remote/mirror/config.py
])
RUNTIME = Section("runtime", "{auto: false}", [  # auto: false takes gpujob's Trainer stop hook off PYTHONPATH
    Field("auto", "runtime_auto", BOOL, True, "true or false"),
])
TENSORBOARD = Section("tensorboard", "{logdir: path}", [Field("logdir", "tensorboard_logdir", TEXT, None, "a path")])
# slurm: a job's own sbatch options on a Slurm host (docs/slurm.md); the host profile gives partition,
# account and qos for every job (spec.json's ``scheduler``), these win over them
MAX_SLURM_CPUS = 1024
SLURM = Section("slurm", "{time: 4h, partition: gpu}", [
    Field("time", "slurm_time", DURATION, None, high=365 * 86400.0,
          zero="0s is no time limit to give: leave the key out for the partition's default"),
    Field("partition", "slurm_partition", TEXT, None, "a partition's name"),
    Field("account", "slurm_account", TEXT, None, "an account's name"),
    Field("qos", "slurm_qos", TEXT, None, "a QOS's name"),
    Field("constraint", "slurm_constraint", TEXT, None, "a node feature expression, such as a100"),
    Field("cpus", "slurm_cpus", INT, None, "a number of CPUs per node", 1, MAX_SLURM_CPUS),
    Field("mem", "slurm_mem", TEXT, None, "a memory size per node as sbatch takes it, such as 64G"),
    Field("sbatch", "slurm_sbatch", TEXTS, (), "sbatch options, one per item, such as --exclusive"),
])
LAUNCHER_FIELD = Field("launcher", "launcher", CHOICE, LAUNCHER, choices=LAUNCHERS)
SECTIONS = (CHECKPOINT, TENSORBOARD, RETRY, STOP, RUNTIME, SLURM)  # in the order the laptop checks them
MAX_NODES = 64  # nodes: N (a Slurm host's nodes)

# spec.json's keys: what the laptop sends (gpujob/config/spec.py JobSpec.to_remote: the declared
# sections' keys under their ``sent`` names, ``retry`` whole), then what ``submit`` adds (:func:`submitted`;
# ``host`` again: the host it ran on) and the supervisor (``allocated``). UNREAD: sent for the record only.
SENT = ("name", "run", "host", "exclude", "data", "data_in_code", "setup", "requirements", "python", "env", "secrets",
        "gpus", "retry", "notify", "autostop", "launcher", "nodes", "node_count", "source", "hosts", "metrics") + tuple(
    f.sent for s in SECTIONS if s is not RETRY for f in s.fields)
ADDED = ("project", "host", "host_env", "price_per_hour", "currency", "shutdown_command", "node", "job_id",
         "cpu_fallback", "scheduler")
UNREAD = ("exclude", "source", "hosts")


def submitted(request: Mapping[str, Any], project: str, job_id: str) -> Dict[str, Any]:
    """What ``submit`` adds to the laptop's spec (remote/jobs/submit.py): what only the instance side knows."""
    return {"project": project, "host": request.get("host"), "host_env": request.get("host_env") or {},
            "price_per_hour": request.get("price_per_hour"), "currency": request.get("currency", CURRENCY),
            "shutdown_command": request.get("shutdown_command"), "node": request.get("node"), "job_id": job_id,
            "cpu_fallback": bool(request.get("cpu_fallback")), "scheduler": request.get("scheduler")}


class Retry:
    """``retry:``: how often and on what a failed attempt starts again."""

    __slots__ = ("max_restarts", "on", "backoff", "on_oom", "move_after", "move_to")

    def __init__(self, doc: Any = None) -> None:
        v = RETRY.read(table(doc))
        self.max_restarts: int = v["max_restarts"]
        self.on: List[str] = v["on"]
        self.backoff: float = v["backoff"]
        self.on_oom: str = v["on_oom"]
        self.move_after: Optional[float] = v["move_after"]  # None: a lost job never moves by itself
        self.move_to: List[str] = v["move_to"]


class Stop:
    """``stop:`` (spec.json's ``stop_grace``, ``stop_mode``, ``stop_max_wait``)."""

    __slots__ = ("grace", "mode", "max_wait")

    def __init__(self, doc: Mapping[str, Any]) -> None:
        v = STOP.read(doc)
        self.grace: float = v["grace"]
        self.mode: str = v["mode"]
        self.max_wait: Optional[float] = v["max_wait"]


class Checkpoint:
    """``checkpoint:`` (spec.json's ``checkpoint_*``): the folder, what counts, the rotation, the copies."""

    __slots__ = ("keep", "dir", "pattern", "backup", "mirror")

    def __init__(self, doc: Mapping[str, Any]) -> None:
        v = CHECKPOINT.read(doc)
        self.keep: int = v["keep"]
        self.dir: Optional[str] = v["dir"]
        self.pattern: Optional[str] = v["pattern"]
        self.backup: bool = v["backup"]  # the mirror's own keep defaults to the folder's (with 0 there, the default keep)
        self.mirror = Mirror(v["mirror"], self.keep if self.keep > 0 else CHECKPOINT_KEEP)


class Slurm:
    """How the job goes to Slurm: ``on`` for a Slurm host (spec.json's ``scheduler``, the profile's
    defaults), the job's own ``slurm:`` options over the profile's; ``nodes`` from ``nodes: N``."""

    __slots__ = ("on", "time", "partition", "account", "qos", "constraint", "cpus", "mem", "sbatch", "nodes")

    def __init__(self, scheduler: Any, node_count: Any, doc: Mapping[str, Any]) -> None:
        profile = table(scheduler)
        v = SLURM.read(doc)
        self.on = profile.get("kind") == "slurm"
        self.time: Optional[float] = v["time"]
        self.partition: Optional[str] = v["partition"] or text(profile.get("partition"))
        self.account: Optional[str] = v["account"] or text(profile.get("account"))
        self.qos: Optional[str] = v["qos"] or text(profile.get("qos"))
        self.constraint: Optional[str] = v["constraint"]
        self.cpus: Optional[int] = v["cpus"]
        self.mem: Optional[str] = v["mem"]
        self.sbatch: List[str] = v["sbatch"]
        n = number(node_count)
        self.nodes = max(1, int(n)) if n is not None else 1


class JobSpec:
    """One job's spec, read once. ``doc`` keeps the document as written (what is saved back)."""

    def __init__(self, doc: Optional[Mapping[str, Any]] = None) -> None:
        d = dict(doc) if isinstance(doc, Mapping) else {}
        self.doc: Dict[str, Any] = d
        self.name = text(d.get("name")) or ""
        self.run = text(d.get("run")) or ""
        self.job_id = text(d.get("job_id"))
        self.project = text(d.get("project"))
        self.host = text(d.get("host"))
        # the environment: the host profile's settings, then the job's own env: (the job wins)
        self.host_env = strings(d.get("host_env"))
        self.env = strings(d.get("env"))
        self.secrets: List[str] = [str(x) for x in items(d.get("secrets"))]
        self.python = (text(d.get("python")) or "").strip()  # "": the login shell's; venv; a path; x.y
        self.setup = text(d.get("setup"))
        self.requirements = text(d.get("requirements"))  # the file's name in the code folder
        self.data = [x for x in items(d.get("data")) if isinstance(x, str)]  # destinations under <root>/data
        self.data_in_code = strings(d.get("data_in_code"))  # a data: source's path in the code folder -> its dst
        gpus = d.get("gpus")
        self.gpus: Union[int, str, None] = gpus if isinstance(gpus, (int, str)) and not isinstance(gpus, bool) else None
        self.allocated = text(d.get("allocated"))  # CUDA_VISIBLE_DEVICES the supervisor chose
        self.cpu_fallback = bool(d.get("cpu_fallback"))
        self.launcher: str = LAUNCHER_FIELD.read(d)
        self.node = table(d.get("node"))  # {rank, count, master_addr, master_port, rdzv_id} of a multi-node job
        self.nodes: List[str] = [str(x) for x in items(d.get("nodes"))]
        self.slurm = Slurm(d.get("scheduler"), d.get("node_count"), d)
        self.retry = Retry(d.get("retry"))
        self.stop = Stop(d)
        self.runtime_auto: bool = RUNTIME.field("auto").read(d)
        self.checkpoint = Checkpoint(d)
        self.tensorboard_logdir: Optional[str] = TENSORBOARD.field("logdir").read(d)
        self.metrics = table(d.get("metrics"))  # {patterns: [regex], total: {epochs|steps: N}}
        self.notify = Notify(d.get("notify"))
        self.autostop = Autostop(d.get("autostop"))
        self.price_per_hour = number(d.get("price_per_hour"))
        self.currency = text(d.get("currency"))  # submit writes CURRENCY when the host names none
        self.shutdown_command = text(d.get("shutdown_command"))

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
