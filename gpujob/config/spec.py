"""Job YAML → validated ``JobSpec``; errors carry file:line:col and "did you mean".

Nothing is sent anywhere until a spec has passed here.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Union

from gpujob.bundle import import_remote
from gpujob.config.speccheck import (
    Collector,
    check_field,
    check_keys,
    check_section,
    int_in,
    short,
    str_list,
    want,
)
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
# The defaults the agent reads a spec with (remote/core/spec.py: a few constants, standard library only):
# a key the job file leaves out means the same on both sides. Its sections' declarations (retry:, stop:,
# checkpoint: ...) are what validate() walks: their types, bounds, defaults and wording are stated there.
DEFAULTS = import_remote("core.spec")
MAX_RESTARTS = DEFAULTS.MAX_RESTARTS
MAX_KEEP = DEFAULTS.MAX_KEEP
MAX_DURATION = DEFAULTS.MAX_DURATION


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
    # a data: source inside the workdir, by its path there -> its dst: never sent as code (exclude:
    # holds it), and the job's code folder links that path to its data view (remote/jobs/submit.py)
    data_in_code: dict[str, str] = field(default_factory=dict)
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
    node_count: int = 1  # nodes: N on a Slurm host (its nodes, one agent each); nodes: [a, b] lists hosts instead
    slurm_time: float | None = None  # slurm: the job's own sbatch options (remote/core/spec.py SLURM)
    slurm_partition: str | None = None
    slurm_account: str | None = None
    slurm_qos: str | None = None
    slurm_constraint: str | None = None
    slurm_cpus: int | None = None
    slurm_mem: str | None = None
    slurm_sbatch: list[str] = field(default_factory=list)
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


def _local_path(ctx: Collector, path: tuple, base: Path, value: str) -> Path | None:
    """``value`` resolved against ``base`` on this machine; None (with an error) when it cannot be."""
    try:
        return (base / Path(value).expanduser()).resolve()
    except (OSError, RuntimeError, ValueError) as e:  # ~nosuchuser, a name too long, a loop of links
        ctx.err(path, f"{short(value)} is not a usable path here: {e}")
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
    "launcher", "nodes", "runtime", "metrics", "sweep", "mlflow", "slurm",
]
RETRY_ON = list(DEFAULTS.RETRY_CAUSES)
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
    ctx = Collector(marks)
    if not isinstance(raw, dict):
        raise SpecError(f"{source}: a job file is a mapping of keys (name:, run:, ...), not a {type(raw).__name__}",
                        "see docs/job-spec.md, or write one with gpujob init")
    check_keys(ctx, (), raw, TOP_KEYS)
    run, wd, name, host, hosts = _command_and_place(ctx, raw, base_dir)
    exclude = str_list(ctx, ("exclude",), raw.get("exclude", []))
    data, data_in_code = _data_section(ctx, raw.get("data") or [], base_dir, wd)
    exclude += [p for p in map(_anchored, data_in_code) if p not in exclude]
    setup, req, python = _preparation(ctx, raw, wd)
    env, secrets = _environment(ctx, raw)
    gpus = raw.get("gpus")
    if gpus is not None and gpus not in ("all", "auto"):
        int_in(ctx, ("gpus",), gpus, 0, MAX_GPUS, "a number of GPUs, 'all', or 'auto' (the CPU on a CPU host)")
    declared = {sec.key: check_section(ctx, raw, sec) for sec in DEFAULTS.SECTIONS}
    ck = declared["checkpoint"]
    _checkpoint_paths(ctx, ck["dir"], ck["pattern"])
    # the mirror's own keep defaults to the checkpoint folder's (with 0 there, the default keep)
    keep = ck["keep"]
    mirror, errs = _mirror_config().validate(ck["mirror"], keep if isinstance(keep, int) and keep > 0
                                             else DEFAULTS.CHECKPOINT_KEEP)
    for msg in errs:
        ctx.err(("checkpoint", "mirror"), msg)
    metrics = _metrics_section(ctx, raw.get("metrics", {}) or {})
    launcher = check_field(ctx, ("launcher",), DEFAULTS.LAUNCHER_FIELD, raw.get("launcher", DEFAULTS.LAUNCHER))
    node_count, raw_nodes = 1, raw.get("nodes", [])
    if isinstance(raw_nodes, int) and not isinstance(raw_nodes, bool):  # nodes: N, a Slurm host's
        if int_in(ctx, ("nodes",), raw_nodes, 1, DEFAULTS.MAX_NODES, "a number of nodes (a Slurm host), or a list "
                  "of hosts"):
            node_count = raw_nodes
        raw_nodes = []
    nodes = str_list(ctx, ("nodes",), raw_nodes)
    if (nodes or node_count > 1) and launcher != "torchrun":
        ctx.err(("nodes",), "several nodes need launcher: torchrun")
    if len(set(nodes)) != len(nodes):
        ctx.err(("nodes",), "a host appears twice")
    if nodes and raw.get("host"):
        ctx.err(("host",), "give either host: or nodes:, not both")
    sections = _agent_sections(ctx, raw)
    sweep = raw.get("sweep") or {}
    want(ctx, ("sweep",), sweep, dict, "a mapping (params:, metric:, method:, trials: ...; docs/experiments.md)")
    mlflow = _mlflow_section(ctx, raw.get("mlflow"))

    if ctx.errors:
        shown = ctx.errors[:MAX_LISTED] + ([f"... and {len(ctx.errors) - MAX_LISTED} more"] if len(ctx.errors) > MAX_LISTED else [])
        raise SpecError(
            f"{len(ctx.errors)} problem(s) in {source}:\n  " + "\n  ".join(shown),
            "fix the job file (see docs/job-spec.md); nothing was sent",
        )
    # the declared sections' keys under their spec.json names (checkpoint_keep, stop_grace, runtime_auto ...)
    sent = {f.sent: declared[sec.key][f.key] for sec in DEFAULTS.SECTIONS if sec is not DEFAULTS.RETRY
            for f in sec.fields}
    sent.update(checkpoint_mirror=mirror, runtime_auto=sent["runtime_auto"] is not False)
    return JobSpec(
        name=name, run=run, workdir=str(wd), host=host, exclude=exclude, data=data,
        data_in_code=data_in_code, setup=setup,
        requirements=req, python=python, env=env, secrets=secrets, gpus=gpus, retry=Retry(**declared["retry"]),
        notify=sections.get("notify", {}), autostop=sections.get("autostop", {}), launcher=launcher, nodes=nodes,
        node_count=node_count, source=source, hosts=hosts, metrics=metrics, sweep=sweep if isinstance(sweep, dict) else {}, mlflow=mlflow,
        **sent,
    )


def _command_and_place(ctx: Collector, raw: dict, base_dir: Path) -> tuple[str, Path, Any, Any, list[str]]:
    """(run, the code folder, name, host, hosts): what runs, and from where."""
    run = raw.get("run")
    if run is None:
        ctx.err((), "missing required key 'run' (the command that trains, e.g. run: python train.py)")
        run = ""
    elif want(ctx, ("run",), run, str, "a shell command as one string (several lines: run: |)"):
        run = run.strip()
        if not run:
            ctx.err(("run",), "is empty: give the command that trains, e.g. run: python train.py")
    workdir = raw.get("workdir", ".")
    if not want(ctx, ("workdir",), workdir, str, "a folder path"):
        workdir = "."
    wd = _local_path(ctx, ("workdir",), base_dir, workdir) or base_dir.resolve()
    if not _exists(wd, "dir"):
        ctx.err(("workdir",), f"folder {wd} does not exist")
    name = raw.get("name", wd.name)
    if want(ctx, ("name",), name, str, "a name") and not _NAME_RE.fullmatch(name):
        ctx.err(("name",), f"{short(name)}: use letters, digits, '.', '_' and '-' (at most 63)")
    host = raw.get("host")
    hosts: list[str] = []
    if isinstance(host, list):
        hosts = str_list(ctx, ("host",), host)
        if not hosts or len(set(hosts)) != len(hosts):
            ctx.err(("host",), "list each host profile once (at least one)")
        host = hosts[0] if hosts else None
    elif host is not None:
        want(ctx, ("host",), host, str, "a host profile name or a list of them")
    return run, wd, name, host, hosts


def _data_section(ctx: Collector, items: Any, base_dir: Path, wd: Path) -> tuple[list[DataEntry], dict[str, str]]:
    """``data:``: local paths, each synced to a relative destination under the data folder; and
    those inside the code folder ``wd``, by their path there (as written: a link into the
    project to a dataset elsewhere counts as inside) -> their destination."""
    data: list[DataEntry] = []
    in_code: dict[str, str] = {}
    if isinstance(items, (str, dict)):  # `data: ./corpus` and `data: {src: ..., dst: ...}` stand for one entry
        items = [items]
    elif not isinstance(items, list):
        ctx.err(("data",), f"expected a path or a list of {{src, dst}}, got {short(items)}")
        items = []
    for i, item in enumerate(items):
        p = ("data", i)
        if isinstance(item, str):
            item = {"src": item}
        if not want(ctx, p, item, dict, "{src: local path, dst: path on the instance}"):
            continue
        check_keys(ctx, p, item, ["src", "dst"])
        src = item.get("src")
        if not want(ctx, p + ("src",), src, str, "a local path"):
            continue
        srcp = _local_path(ctx, p + ("src",), base_dir, src)
        if srcp is None:
            continue
        if not _exists(srcp, "any"):
            ctx.err(p + ("src",), f"{srcp} does not exist")
        dst = item.get("dst") or srcp.name
        if not want(ctx, p + ("dst",), dst, str, "a path under the data folder"):
            continue
        if dst.startswith("/") or ".." in Path(dst).parts or not Path(dst).parts:
            ctx.err(p + ("dst",), f"{short(dst)} must be a relative path under the data folder")
        data.append(DataEntry(src=str(srcp), dst=dst))
        for at in _inside(wd, base_dir / Path(src).expanduser(), srcp):
            in_code.setdefault(at, dst)
    return data, in_code


def _inside(wd: Path, written: Path, resolved: Path) -> list[str]:
    """Where a path lies strictly inside the folder ``wd`` ("a/b"): as written (normalised), and
    where it leads when that is elsewhere in ``wd`` too (a link inside the project)."""
    import os

    found: list[str] = []
    for p in (os.path.normpath(written), str(resolved)):
        for top in dict.fromkeys((str(wd), os.path.realpath(wd))):
            rel = os.path.relpath(p, top) if os.path.isabs(p) else ".."
            if rel not in (".", "..") and not rel.startswith("../") and rel not in found:
                found.append(Path(rel).as_posix())
                break
    return found


def _anchored(rel: str) -> str:
    """``rel`` as an ``exclude:`` rule naming that one path (glob characters escaped)."""
    esc = re.sub(r"([\\*?\[\]!#])", r"\\\1", rel)
    return "/" + (esc[:-1] + "\\ " if esc.endswith(" ") else esc)


def _preparation(ctx: Collector, raw: dict, wd: Path) -> tuple[Any, Any, Any]:
    """(setup, requirements, python): what prepares the job's environment."""
    setup = raw.get("setup")
    if isinstance(setup, list):
        setup = "\n".join(str_list(ctx, ("setup",), setup))
    elif setup is not None and not want(ctx, ("setup",), setup, str, "shell commands"):
        setup = None
    req = raw.get("requirements")
    if req is not None and want(ctx, ("requirements",), req, str, "a file path"):
        rp = _local_path(ctx, ("requirements",), wd, req)
        if rp is not None and not _exists(rp, "file"):
            ctx.err(("requirements",), f"{rp} does not exist")
        req = str(rp)
    python = raw.get("python")
    if python is not None:
        want(ctx, ("python",), python, str, "an interpreter: a path, 'conda:NAME' or 'venv'")
    return setup, req, python


def _environment(ctx: Collector, raw: dict) -> tuple[dict[str, str], list[str]]:
    """(env, secrets): the job's variables, and the names of those the laptop sends from its own."""
    env: dict[str, str] = {}
    if want(ctx, ("env",), raw.get("env") or {}, dict, "a mapping NAME: value"):
        for k, v in (raw.get("env") or {}).items():
            if not _ENV_RE.fullmatch(str(k)):
                ctx.err(("env", k), f"{short(k)} is not a valid variable name")
            elif k in RESERVED_ENV:
                ctx.err(("env", k), f"{k} is set by gpujob for every job: use another name")
            elif isinstance(v, (dict, list)):
                ctx.err(("env", k), "expected a string or number")
            elif isinstance(v, str) and "\0" in v:
                ctx.err(("env", k), "holds a NUL character, which no variable can carry")
            else:
                env[str(k)] = "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
    secrets = str_list(ctx, ("secrets",), raw.get("secrets", []))
    for i, s in enumerate(secrets):
        if not _ENV_RE.fullmatch(s):
            ctx.err(("secrets", i), f"{short(s)} is not a valid variable name")
        elif s in RESERVED_ENV:
            ctx.err(("secrets", i), f"{s} is set by gpujob for every job: use another name")
    return env, secrets


def _checkpoint_paths(ctx: Collector, ckdir: str | None, pat: str | None) -> None:
    """``checkpoint.dir`` and ``.pattern`` beyond their types: where they may point."""
    if ckdir is not None:
        rel = Path(ckdir)
        if not (ckdir.startswith("/") or ckdir.startswith("~")) and ".." in rel.parts:
            ctx.err(("checkpoint", "dir"), "a relative folder must lie inside the code (no '..'), e.g. outputs; "
                    "for storage every node sees give an absolute path such as /root/autodl-fs/ckpt")
        elif not rel.parts and not pat:  # the script saves into its working folder
            ctx.err(("checkpoint", "dir"), "'.' (the code folder itself) needs a pattern naming the checkpoint "
                    "files, so that no other file of the code counts (or is rotated away): "
                    "checkpoint: {dir: ., pattern: 'ckpt_*.pt'}")
    if pat is not None and (pat.startswith("/") or ".." in Path(pat).parts):
        ctx.err(("checkpoint", "pattern"), "a glob relative to the checkpoint folder, e.g. '*.pt' or "
                "'version_*/checkpoints/*.ckpt'")


def _agent_sections(ctx: Collector, raw: dict) -> dict[str, dict]:
    """``notify:`` and ``autostop:``, checked by the agent's own modules."""
    sections: dict[str, dict] = {}
    _register_remote_validators()
    for sec in ("notify", "autostop"):
        val = raw.get(sec) or {}
        if sec == "notify" and isinstance(val, list):  # a bare list of channels means the channels
            val = {"channels": val}
        if want(ctx, (sec,), val, dict, "a mapping" + (" (did you mean notify: {channels: [...]}?)" if sec == "notify" else "")):
            sections[sec] = val
            validator = SECTION_VALIDATORS.get(sec)
            for msg in validator(val) if validator else []:
                ctx.err((sec,), msg)
    return sections


def _mlflow_section(ctx: Collector, m: Any) -> dict[str, Any]:
    """``mlflow: URI`` or ``{tracking_uri: URI, experiment: NAME}`` (docs/experiments.md, the lab's MLflow)."""
    if m is None:
        return {}
    if isinstance(m, str):
        m = {"tracking_uri": m}
    if not want(ctx, ("mlflow",), m, dict, "a tracking URI, or {tracking_uri: URI, experiment: NAME}"):
        return {}
    check_keys(ctx, ("mlflow",), m, ["tracking_uri", "experiment"])
    out: dict[str, Any] = {}
    for key in ("tracking_uri", "experiment"):
        v = m.get(key)
        if v is None:
            continue
        if not isinstance(v, str) or not v.strip() or len(v) > 1000:
            ctx.err(("mlflow", key), f"expected a text, got {short(v)}")
            continue
        out[key] = v.strip()
    from gpujob.config.secreturl import credential_in

    if out.get("tracking_uri") and credential_in(out["tracking_uri"]):
        ctx.err(("mlflow", "tracking_uri"), "holds a password: the job file is sent to the host; give it in "
                "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) on the laptop")
    return out


def _metrics_section(ctx: Collector, m: Any) -> dict[str, Any]:
    """``metrics: {patterns: [regex with named groups], total: {epochs: N} | {steps: N}}``: how the log
    reader reads a format it does not know (docs/agent.md); ``maximize``/``minimize``: metric names
    whose best is their highest/lowest value (the ledger's "best", docs/experiments.md)."""
    if not want(ctx, ("metrics",), m, dict, "{patterns: [...], total: {epochs: N}}"):
        return {}
    check_keys(ctx, ("metrics",), m, ["patterns", "total", "maximize", "minimize"])
    out: dict[str, Any] = {}
    for way in ("maximize", "minimize"):  # which way "best" goes for these names (docs/experiments.md)
        names = str_list(ctx, ("metrics", way), m.get(way, []))
        if names:
            out[way] = names
    for name in set(out.get("maximize", [])) & set(out.get("minimize", [])):
        ctx.err(("metrics", "minimize"), f"{name!r} is under maximize too: give each metric one direction")
    pats = str_list(ctx, ("metrics", "patterns"), m.get("patterns", []))
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
    if total is not None and want(ctx, ("metrics", "total"), total, dict, "{epochs: N} or {steps: N}"):
        check_keys(ctx, ("metrics", "total"), total, ["epochs", "steps"])
        for k in ("epochs", "steps"):
            if k in total and int_in(ctx, ("metrics", "total", k), total[k], 1, 10**12, f"a number of {k}"):
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

