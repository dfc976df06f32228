"""Job YAML → validated ``JobSpec``; errors carry file:line:col and "did you mean".

Nothing is sent anywhere until a spec has passed here.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Union

from gpujob.bundle import import_remote
from gpujob.config.yamlsafe import Mark, load_yaml, read_job_file, read_value
from gpujob.errors import SpecError

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# what the agent sets for each attempt and finds the job's processes and its stop protocol by
# (a job whose env replaced GPUJOB_JOB_DIR left processes behind a stop)
RESERVED_ENV = ("GPUJOB_JOB_ID", "GPUJOB_JOB_DIR", "GPUJOB_STOP_FILE", "GPUJOB_ATTEMPT", "GPUJOB_RESUME")
MAX_LISTED = 20  # problems listed in one error
# Bounds of the numbers (docs/job-spec.md says the same).
MAX_GPUS = 64
MAX_RESTARTS = 1000
MAX_KEEP = 1000
MAX_DURATION = 30 * 86400.0
# The defaults the agent reads a spec with (remote/core/spec.py: a few constants, standard library only):
# a key the job file leaves out means the same on both sides.
DEFAULTS = import_remote("core.spec")


@dataclass
class DataEntry:
    """One ``data:`` item: a local file or folder synced to ``<root>/data/<dst>``."""

    src: str
    dst: str


@dataclass
class Retry:
    max_restarts: int = 0
    on: list[str] = field(default_factory=lambda: list(DEFAULTS.RETRY_ON))  # error, oom, signal
    backoff: float = DEFAULTS.RETRY_BACKOFF
    on_oom: str = DEFAULTS.ON_OOM  # retry | halve_batch
    move_after: float | None = None  # a lost job whose host stays away this long moves (gpujob guard)
    move_to: list[str] = field(default_factory=list)  # where to (default: the job's host: list)


@dataclass
class JobSpec:
    """A validated job: what the user asked for, with paths resolved on the laptop."""

    name: str
    run: str
    workdir: str
    host: str | None = None
    exclude: list[str] = field(default_factory=list)
    data: list[DataEntry] = field(default_factory=list)
    setup: str | None = None
    requirements: str | None = None
    python: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)
    gpus: Union[int, str, None] = None
    checkpoint_keep: int = DEFAULTS.CHECKPOINT_KEEP
    tensorboard_logdir: str | None = None
    retry: Retry = field(default_factory=Retry)
    stop_grace: float = DEFAULTS.STOP_GRACE
    stop_mode: str = DEFAULTS.STOP_MODE  # checkpoint: auto-stop and move wait for the next complete checkpoint first
    stop_max_wait: float | None = None  # ... at most this long (None: twice its usual interval, else 20 min)
    runtime_auto: bool = True  # runtime: {auto: false} takes gpujob's Trainer stop hook off PYTHONPATH
    notify: dict[str, Any] = field(default_factory=dict)
    autostop: dict[str, Any] = field(default_factory=dict)
    launcher: str = DEFAULTS.LAUNCHER  # none | torchrun
    nodes: list[str] = field(default_factory=list)
    checkpoint_dir: str | None = None  # absolute: shared storage (multi-node); relative: a folder the code writes
    checkpoint_pattern: str | None = None  # glob (under the checkpoint folder) of what the script writes
    checkpoint_mirror: dict[str, Any] = field(default_factory=dict)  # remote/mirror/config.py's normalised form
    checkpoint_backup: bool = True  # a copy of each checkpoint file rewritten in place (remote/ckpt/keepcopy.py)
    source: str = "<spec>"
    hosts: list[str] = field(default_factory=list)  # host: [a, b, c]: placement tries them in order
    metrics: dict[str, Any] = field(default_factory=dict)  # {patterns: [regex], total: {epochs|steps: N}}: the log reader
    sweep: dict[str, Any] = field(default_factory=dict)  # gpujob sweep's search (usecases/experiments/sweep.py checks it)
    mlflow: dict[str, Any] = field(default_factory=dict)  # {tracking_uri, experiment}: the laptop exports (usecases/lab/)

    def to_remote(self) -> dict[str, Any]:
        """What the agent receives (and writes to spec.json): never secret values."""
        d = asdict(self)
        d.pop("workdir")
        d["data"] = [e["dst"] for e in d["data"]]
        if self.requirements:
            d["requirements"] = Path(self.requirements).name
        d["notify"] = notify_secrets(self.notify)[0]  # literal secrets go to the 0600 secrets file
        d.pop("sweep")  # the laptop drives a sweep; a trial's agent has no use for it
        d.pop("mlflow")  # the laptop exports the run; the host never learns the tracking server
        return d


class _Ctx:
    """Collects errors with their positions."""

    def __init__(self, marks: dict[tuple, Mark]) -> None:
        self.marks = marks
        self.errors: list[str] = []

    def err(self, path: tuple, msg: str) -> None:
        where = self.marks.get(path)
        while where is None and path:
            path = path[:-1]
            where = self.marks.get(path)
        key = ".".join(str(p) for p in path)
        self.errors.append(f"{where or '?'}: {key + ': ' if key else ''}{msg}")


def _suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else f" (known keys: {', '.join(sorted(known))})"


def _check_keys(ctx: _Ctx, path: tuple, d: dict, known: list[str]) -> None:
    for k in d:
        if k not in known:
            ctx.err(path + (k,), f"unknown key {_short(k)}{_suggest(str(k), known)}")


def _short(value: Any) -> str:
    """``repr`` cut to one line's worth: an error message names a value, it does not reprint it."""
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


def _want(ctx: _Ctx, path: tuple, value: Any, kind: type | tuple, what: str) -> bool:
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        ok = False
    else:
        ok = isinstance(value, kind)
    if not ok:
        ctx.err(path, f"expected {what}, got {type(value).__name__} {_short(value)}")
    elif isinstance(value, str) and "\0" in value:
        ctx.err(path, "holds a NUL character (\\0), which no command, path or variable can carry")
        ok = False
    return ok


def _int_in(ctx: _Ctx, path: tuple, value: Any, lo: int, hi: int, what: str) -> bool:
    """``value`` is a whole number from ``lo`` to ``hi``."""
    if not _want(ctx, path, value, int, what):
        return False
    if not lo <= value <= hi:
        ctx.err(path, f"{_short(value)} is out of range: expected {what} from {lo} to {hi}")
        return False
    return True


def _str_list(ctx: _Ctx, path: tuple, value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not _want(ctx, path, value, list, "a list of strings"):
        return []
    out = []
    for i, v in enumerate(value):
        if _want(ctx, path + (i,), v, (str, int, float), "a string"):
            out.append(str(v))
    return out


def _duration(ctx: _Ctx, path: tuple, value: Any, default: float) -> float:
    """A duration from 0 to ``MAX_DURATION`` (30 days), else an error and ``default``."""
    try:
        seconds = import_remote("core.protocol").parse_duration(value)
    except ValueError as e:
        ctx.err(path, str(e))
        return default
    if not 0 <= seconds <= MAX_DURATION:
        ctx.err(path, f"{_short(value)} is out of range: expected 0s to 30d")
        return default
    return seconds


def _local_path(ctx: _Ctx, path: tuple, base: Path, value: str) -> Path | None:
    """``value`` resolved against ``base`` on this machine; None (with an error) when it cannot be."""
    try:
        return (base / Path(value).expanduser()).resolve()
    except (OSError, RuntimeError, ValueError) as e:  # ~nosuchuser, a name too long, a loop of links
        ctx.err(path, f"{_short(value)} is not a usable path here: {e}")
        return None


def _exists(p: Path, kind: str) -> bool:
    """``p`` is a folder (``kind`` "dir"), a file ("file") or anything ("any"); False when it cannot be read."""
    try:
        return {"dir": p.is_dir, "file": p.is_file, "any": p.exists}[kind]()
    except (OSError, ValueError):
        return False


TOP_KEYS = [
    "name", "host", "workdir", "exclude", "data", "setup", "requirements", "python", "run",
    "env", "secrets", "gpus", "checkpoint", "tensorboard", "retry", "stop", "notify", "autostop",
    "launcher", "nodes", "runtime", "metrics", "sweep", "mlflow",
]
RETRY_ON = ["error", "oom", "nan", "nccl", "signal"]
# Validators of sections that other modules own (notifications, auto-stop): name -> fn(dict) -> errors.
SECTION_VALIDATORS: dict[str, Callable[[Any], list[str]]] = {}


def _register_remote_validators() -> None:
    """``notify:`` and ``autostop:`` are checked by the agent's own modules (one set of rules)."""
    from gpujob.bundle import import_remote

    SECTION_VALIDATORS.setdefault("notify", import_remote("notify").validate_channels)
    SECTION_VALIDATORS.setdefault("autostop", import_remote("run.autostop").validate)


def _mirror_config() -> Any:
    """``checkpoint.mirror`` is checked by the agent's own module (one set of rules)."""
    from gpujob.bundle import import_remote

    return import_remote("mirror.config")


def notify_secrets(notify: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(``notify`` with each literal secret replaced by ``${GPUJOB_NOTIFY_..}``, {name: value})."""
    from gpujob.bundle import import_remote

    return import_remote("notify").externalize_secrets(notify)


def validate(raw: Any, marks: dict[tuple, Mark], source: str, base_dir: Path) -> JobSpec:
    """Check every key and type; raise one ``SpecError`` listing every problem found."""
    ctx = _Ctx(marks)
    if not isinstance(raw, dict):
        raise SpecError(f"{source}: a job file is a mapping of keys (name:, run:, ...), not a {type(raw).__name__}",
                        "see docs/job-spec.md, or write one with gpujob init")
    _check_keys(ctx, (), raw, TOP_KEYS)
    run = raw.get("run")
    if run is None:
        ctx.err((), "missing required key 'run' (the command that trains, e.g. run: python train.py)")
        run = ""
    elif _want(ctx, ("run",), run, str, "a shell command as one string (several lines: run: |)"):
        run = run.strip()
        if not run:
            ctx.err(("run",), "is empty: give the command that trains, e.g. run: python train.py")
    workdir = raw.get("workdir", ".")
    if not _want(ctx, ("workdir",), workdir, str, "a folder path"):
        workdir = "."
    wd = _local_path(ctx, ("workdir",), base_dir, workdir) or base_dir.resolve()
    if not _exists(wd, "dir"):
        ctx.err(("workdir",), f"folder {wd} does not exist")
    name = raw.get("name", wd.name)
    if _want(ctx, ("name",), name, str, "a name") and not _NAME_RE.fullmatch(name):
        ctx.err(("name",), f"{_short(name)}: use letters, digits, '.', '_' and '-' (at most 63)")
    host = raw.get("host")
    hosts: list[str] = []
    if isinstance(host, list):
        hosts = _str_list(ctx, ("host",), host)
        if not hosts or len(set(hosts)) != len(hosts):
            ctx.err(("host",), "list each host profile once (at least one)")
        host = hosts[0] if hosts else None
    elif host is not None:
        _want(ctx, ("host",), host, str, "a host profile name or a list of them")
    exclude = _str_list(ctx, ("exclude",), raw.get("exclude", []))

    data: list[DataEntry] = []
    items = raw.get("data") or []
    if isinstance(items, (str, dict)):  # `data: ./corpus` and `data: {src: ..., dst: ...}` stand for one entry
        items = [items]
    elif not isinstance(items, list):
        ctx.err(("data",), f"expected a path or a list of {{src, dst}}, got {_short(items)}")
        items = []
    for i, item in enumerate(items):
        p = ("data", i)
        if isinstance(item, str):
            item = {"src": item}
        if not _want(ctx, p, item, dict, "{src: local path, dst: path on the instance}"):
            continue
        _check_keys(ctx, p, item, ["src", "dst"])
        src = item.get("src")
        if not _want(ctx, p + ("src",), src, str, "a local path"):
            continue
        srcp = _local_path(ctx, p + ("src",), base_dir, src)
        if srcp is None:
            continue
        if not _exists(srcp, "any"):
            ctx.err(p + ("src",), f"{srcp} does not exist")
        dst = item.get("dst") or srcp.name
        if not _want(ctx, p + ("dst",), dst, str, "a path under the data folder"):
            continue
        if dst.startswith("/") or ".." in Path(dst).parts or not Path(dst).parts:
            ctx.err(p + ("dst",), f"{_short(dst)} must be a relative path under the data folder")
        data.append(DataEntry(src=str(srcp), dst=dst))

    setup = raw.get("setup")
    if isinstance(setup, list):
        setup = "\n".join(_str_list(ctx, ("setup",), setup))
    elif setup is not None and not _want(ctx, ("setup",), setup, str, "shell commands"):
        setup = None
    req = raw.get("requirements")
    if req is not None and _want(ctx, ("requirements",), req, str, "a file path"):
        rp = _local_path(ctx, ("requirements",), wd, req)
        if rp is not None and not _exists(rp, "file"):
            ctx.err(("requirements",), f"{rp} does not exist")
        req = str(rp)
    python = raw.get("python")
    if python is not None:
        _want(ctx, ("python",), python, str, "an interpreter: a path, 'conda:NAME' or 'venv'")

    env: dict[str, str] = {}
    if _want(ctx, ("env",), raw.get("env") or {}, dict, "a mapping NAME: value"):
        for k, v in (raw.get("env") or {}).items():
            if not _ENV_RE.fullmatch(str(k)):
                ctx.err(("env", k), f"{_short(k)} is not a valid variable name")
            elif k in RESERVED_ENV:
                ctx.err(("env", k), f"{k} is set by gpujob for every job: use another name")
            elif isinstance(v, (dict, list)):
                ctx.err(("env", k), "expected a string or number")
            elif isinstance(v, str) and "\0" in v:
                ctx.err(("env", k), "holds a NUL character, which no variable can carry")
            else:
                env[str(k)] = "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
    secrets = _str_list(ctx, ("secrets",), raw.get("secrets", []))
    for i, s in enumerate(secrets):
        if not _ENV_RE.fullmatch(s):
            ctx.err(("secrets", i), f"{_short(s)} is not a valid variable name")
        elif s in RESERVED_ENV:
            ctx.err(("secrets", i), f"{s} is set by gpujob for every job: use another name")

    gpus = raw.get("gpus")
    if gpus is not None and gpus not in ("all", "auto"):
        _int_in(ctx, ("gpus",), gpus, 0, MAX_GPUS, "a number of GPUs, 'all', or 'auto' (the CPU on a CPU host)")

    keep = DEFAULTS.CHECKPOINT_KEEP
    backup = True
    mirror: dict[str, Any] = {}
    ck = raw.get("checkpoint", {}) or {}
    if _want(ctx, ("checkpoint",), ck, dict, "{keep: N}"):
        _check_keys(ctx, ("checkpoint",), ck, ["keep", "dir", "pattern", "mirror", "backup"])
        backup = ck.get("backup", True)
        _want(ctx, ("checkpoint", "backup"), backup, bool, "true or false (a copy of a checkpoint file the script "
              "overwrites in place, such as ckpt.pt, restored when a save is cut short)")
        ckdir = ck.get("dir")
        if ckdir is not None and _want(ctx, ("checkpoint", "dir"), ckdir, str, "a folder"):
            rel = Path(ckdir)
            if not (ckdir.startswith("/") or ckdir.startswith("~")) and ".." in rel.parts:
                ctx.err(("checkpoint", "dir"), "a relative folder must lie inside the code (no '..'), e.g. outputs; "
                        "for storage every node sees give an absolute path such as /root/autodl-fs/ckpt")
            elif not rel.parts and not ck.get("pattern"):  # the script saves into its working folder
                ctx.err(("checkpoint", "dir"), "'.' (the code folder itself) needs a pattern naming the checkpoint "
                        "files, so that no other file of the code counts (or is rotated away): "
                        "checkpoint: {dir: ., pattern: 'ckpt_*.pt'}")
        pat = ck.get("pattern")
        if pat is not None and _want(ctx, ("checkpoint", "pattern"), pat, str, "a glob such as '*.pt'"):
            if pat.startswith("/") or ".." in Path(pat).parts:
                ctx.err(("checkpoint", "pattern"), "a glob relative to the checkpoint folder, e.g. '*.pt' or "
                        "'version_*/checkpoints/*.ckpt'")
        keep = ck.get("keep", DEFAULTS.CHECKPOINT_KEEP)
        # 0: gpujob deletes none (a script that rotates its own: timm's --checkpoint-hist, HF's save_total_limit)
        _int_in(ctx, ("checkpoint", "keep"), keep, 0, MAX_KEEP, "a number of checkpoints (0: gpujob deletes none)")
        # the mirror's own keep defaults to the checkpoint folder's (with 0 there, the default keep)
        mirror, errs = _mirror_config().validate(ck.get("mirror"), keep if isinstance(keep, int) and keep > 0
                                                 else DEFAULTS.CHECKPOINT_KEEP)
        for msg in errs:
            ctx.err(("checkpoint", "mirror"), msg)
    metrics = _metrics_section(ctx, raw.get("metrics", {}) or {})
    tb = raw.get("tensorboard", {}) or {}
    logdir = None
    if _want(ctx, ("tensorboard",), tb, dict, "{logdir: path}"):
        _check_keys(ctx, ("tensorboard",), tb, ["logdir"])
        logdir = tb.get("logdir")
        if logdir is not None:
            _want(ctx, ("tensorboard", "logdir"), logdir, str, "a path")

    retry = Retry()
    rr = raw.get("retry", {}) or {}
    if _want(ctx, ("retry",), rr, dict, "{max_restarts, on, backoff, on_oom}"):
        _check_keys(ctx, ("retry",), rr, ["max_restarts", "on", "backoff", "on_oom", "move_after", "move_to"])
        if rr.get("move_after") is not None:
            after = _duration(ctx, ("retry", "move_after"), rr["move_after"], -1.0)
            if after == 0:
                ctx.err(("retry", "move_after"), "0s would move a job at its first silence: give a duration "
                        "such as 20m (leave the key out for no automatic move)")
            elif after > 0:
                retry.move_after = after
        retry.move_to = _str_list(ctx, ("retry", "move_to"), rr.get("move_to") or [])
        mr = rr.get("max_restarts", 0)
        if _int_in(ctx, ("retry", "max_restarts"), mr, 0, MAX_RESTARTS, "a number of restarts"):
            retry.max_restarts = mr
        if "on" in rr:
            retry.on = _str_list(ctx, ("retry", "on"), rr["on"])
            for i, o in enumerate(retry.on):
                if o not in RETRY_ON:
                    ctx.err(("retry", "on", i), f"unknown cause {_short(o)}{_suggest(o, RETRY_ON)}")
        if "backoff" in rr:
            retry.backoff = _duration(ctx, ("retry", "backoff"), rr["backoff"], retry.backoff)
        oo = rr.get("on_oom", DEFAULTS.ON_OOM)
        if oo not in ("retry", "halve_batch"):
            ctx.err(("retry", "on_oom"), f"expected 'retry' or 'halve_batch', got {_short(oo)}")
        retry.on_oom = oo
    grace, stop_mode = DEFAULTS.STOP_GRACE, DEFAULTS.STOP_MODE
    max_wait: float | None = None
    st = raw.get("stop", {}) or {}
    if _want(ctx, ("stop",), st, dict, f"{{grace: {grace:g}s}}"):
        _check_keys(ctx, ("stop",), st, ["grace", "mode", "max_wait"])
        if "grace" in st:
            grace = _duration(ctx, ("stop", "grace"), st["grace"], grace)
        stop_mode = st.get("mode", DEFAULTS.STOP_MODE)
        if stop_mode not in ("now", "checkpoint"):
            ctx.err(("stop", "mode"), f"expected 'now' or 'checkpoint', got {_short(stop_mode)}")
        if "max_wait" in st:
            max_wait = _duration(ctx, ("stop", "max_wait"), st["max_wait"], 1200.0)

    auto = True
    rt = raw.get("runtime", {}) or {}
    if _want(ctx, ("runtime",), rt, dict, "{auto: false}"):
        _check_keys(ctx, ("runtime",), rt, ["auto"])
        auto = rt.get("auto", True)
        _want(ctx, ("runtime", "auto"), auto, bool, "true or false")

    launcher = raw.get("launcher", DEFAULTS.LAUNCHER)
    if launcher not in ("none", "torchrun"):
        ctx.err(("launcher",), f"expected 'torchrun' or 'none', got {_short(launcher)}")
    nodes = _str_list(ctx, ("nodes",), raw.get("nodes", []))
    if nodes and launcher != "torchrun":
        ctx.err(("nodes",), "several nodes need launcher: torchrun")
    if len(set(nodes)) != len(nodes):
        ctx.err(("nodes",), "a host appears twice")
    if nodes and raw.get("host"):
        ctx.err(("host",), "give either host: or nodes:, not both")

    sections: dict[str, dict] = {}
    _register_remote_validators()
    for sec in ("notify", "autostop"):
        val = raw.get(sec) or {}
        if sec == "notify" and isinstance(val, list):  # a bare list of channels means the channels
            val = {"channels": val}
        if _want(ctx, (sec,), val, dict, "a mapping" + (" (did you mean notify: {channels: [...]}?)" if sec == "notify" else "")):
            sections[sec] = val
            validator = SECTION_VALIDATORS.get(sec)
            for msg in validator(val) if validator else []:
                ctx.err((sec,), msg)

    sweep = raw.get("sweep") or {}
    _want(ctx, ("sweep",), sweep, dict, "a mapping (params:, metric:, method:, trials: ...; docs/experiments.md)")
    mlflow = _mlflow_section(ctx, raw.get("mlflow"))

    if ctx.errors:
        shown = ctx.errors[:MAX_LISTED] + ([f"... and {len(ctx.errors) - MAX_LISTED} more"] if len(ctx.errors) > MAX_LISTED else [])
        raise SpecError(
            f"{len(ctx.errors)} problem(s) in {source}:\n  " + "\n  ".join(shown),
            "fix the job file (see docs/job-spec.md); nothing was sent",
        )
    return JobSpec(
        name=name, run=run, workdir=str(wd), host=host, exclude=exclude, data=data, setup=setup,
        requirements=req, python=python, env=env, secrets=secrets, gpus=gpus, checkpoint_keep=keep,
        tensorboard_logdir=logdir, retry=retry, stop_grace=grace, stop_mode=stop_mode, stop_max_wait=max_wait, notify=sections.get("notify", {}),
        autostop=sections.get("autostop", {}), launcher=launcher, nodes=nodes,
        runtime_auto=auto is not False,
        checkpoint_dir=(ck.get("dir") if isinstance(ck, dict) else None),
        checkpoint_pattern=(ck.get("pattern") if isinstance(ck, dict) else None), source=source, hosts=hosts,
        metrics=metrics,
        sweep=sweep if isinstance(sweep, dict) else {}, mlflow=mlflow,
        checkpoint_mirror=mirror, checkpoint_backup=backup is not False,
    )


def _mlflow_section(ctx: _Ctx, m: Any) -> dict[str, Any]:
    """``mlflow: URI`` or ``{tracking_uri: URI, experiment: NAME}`` (docs/experiments.md, the lab's MLflow)."""
    if m is None:
        return {}
    if isinstance(m, str):
        m = {"tracking_uri": m}
    if not _want(ctx, ("mlflow",), m, dict, "a tracking URI, or {tracking_uri: URI, experiment: NAME}"):
        return {}
    _check_keys(ctx, ("mlflow",), m, ["tracking_uri", "experiment"])
    out: dict[str, Any] = {}
    for key in ("tracking_uri", "experiment"):
        v = m.get(key)
        if v is None:
            continue
        if not isinstance(v, str) or not v.strip() or len(v) > 1000:
            ctx.err(("mlflow", key), f"expected a text, got {_short(v)}")
            continue
        out[key] = v.strip()
    from gpujob.config.secreturl import credential_in

    if out.get("tracking_uri") and credential_in(out["tracking_uri"]):
        ctx.err(("mlflow", "tracking_uri"), "holds a password: the job file is sent to the host; give it in "
                "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) on the laptop")
    return out


def _metrics_section(ctx: _Ctx, m: Any) -> dict[str, Any]:
    """``metrics: {patterns: [regex with named groups], total: {epochs: N} | {steps: N}}``: how the log
    reader reads a format it does not know (docs/agent.md)."""
    if not _want(ctx, ("metrics",), m, dict, "{patterns: [...], total: {epochs: N}}"):
        return {}
    _check_keys(ctx, ("metrics",), m, ["patterns", "total"])
    out: dict[str, Any] = {}
    pats = _str_list(ctx, ("metrics", "patterns"), m.get("patterns", []))
    for i, rx in enumerate(pats):
        try:
            groups = re.compile(rx).groupindex
        except re.error as e:
            ctx.err(("metrics", "patterns", i), f"not a regular expression ({e})")
            continue
        if not groups:
            ctx.err(("metrics", "patterns", i), "names no group: write (?P<loss>[\\d.]+) for each value to read "
                    "(step, epoch, batch, batches name the progress; any other name is a metric)")
    if pats:
        out["patterns"] = pats
    total = m.get("total")
    if total is not None and _want(ctx, ("metrics", "total"), total, dict, "{epochs: N} or {steps: N}"):
        _check_keys(ctx, ("metrics", "total"), total, ["epochs", "steps"])
        for k in ("epochs", "steps"):
            if k in total and _int_in(ctx, ("metrics", "total", k), total[k], 1, 10**12, f"a number of {k}"):
                out.setdefault("total", {})[k] = total[k]
    return out


def apply_overrides(raw: Any, marks: dict[tuple, Mark], overrides: list[str]) -> Any:
    """Apply ``--set a.b=value`` (value read as YAML) on the raw tree."""
    if not isinstance(raw, dict):
        return raw  # not a job file: validate says so
    for item in overrides:
        if "=" not in item:
            raise SpecError(f"--set {item!r}: expected KEY=VALUE", "e.g. --set retry.max_restarts=3")
        key, _, text = item.partition("=")
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise SpecError(f"--set {item!r}: empty key", "e.g. --set gpus=2")
        value = read_value(text, f"--set {key}", marks, tuple(parts))
        node = raw
        for i, p in enumerate(parts[:-1]):
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
            marks.setdefault(tuple(parts[: i + 1]), f"--set {key}")
        node[parts[-1]] = value
        marks[tuple(parts)] = f"--set {key}"
    return raw


def load_spec(path: str | Path | None, overrides: list[str] | None = None, *, run: str | None = None) -> JobSpec:
    """Read and validate a job file (``job.yaml`` in the current folder when ``path`` is None)."""
    if path is None:
        path = Path("job.yaml")
        if not path.exists() and run is None:
            raise SpecError("no job file given and no job.yaml here", "pass its path (e.g. my-job/job.yaml), or write one with gpujob init")
    p = Path(path)
    if run is not None and not p.exists():
        raw: Any = {"run": run}
        marks: dict[tuple, Mark] = {}
        source, base = "<command line>", Path.cwd()
    else:
        text = read_job_file(p)
        source, base = str(p), p.resolve().parent
        raw, marks = load_yaml(text, source)
        if raw == {} and not overrides:
            raise SpecError(f"{p} is empty: a job file needs at least run:",
                            "write run: python train.py in it, or create one with gpujob init")
    raw = apply_overrides(raw, marks, overrides or [])
    return validate(raw, marks, source, base)

