"""Job YAML → validated ``JobSpec``; errors carry file:line:col and "did you mean".

Nothing is sent anywhere until a spec has passed here.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Union

import yaml

from gpujob.durations import parse_duration
from gpujob.errors import SpecError

Mark = str  # "job.yaml:3:5" or "--set retry.max_restarts"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class DataEntry:
    """One ``data:`` item: a local file or folder synced to ``<root>/data/<dst>``."""

    src: str
    dst: str


@dataclass
class Retry:
    max_restarts: int = 0
    on: list[str] = field(default_factory=lambda: ["error", "oom", "signal"])  # signal: one gpujob did not send
    backoff: float = 10.0
    on_oom: str = "retry"  # retry | halve_batch


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
    checkpoint_keep: int = 3
    tensorboard_logdir: str | None = None
    retry: Retry = field(default_factory=Retry)
    stop_grace: float = 120.0
    runtime_auto: bool = True  # runtime: {auto: false} takes gpujob's Trainer stop hook off PYTHONPATH
    notify: dict[str, Any] = field(default_factory=dict)
    autostop: dict[str, Any] = field(default_factory=dict)
    launcher: str = "none"  # none | torchrun
    nodes: list[str] = field(default_factory=list)
    checkpoint_dir: str | None = None  # absolute: shared storage (multi-node); relative: a folder the code writes
    checkpoint_pattern: str | None = None  # glob (under the checkpoint folder) of what the script writes
    source: str = "<spec>"

    def to_remote(self) -> dict[str, Any]:
        """What the agent receives (and writes to spec.json): never secret values."""
        d = asdict(self)
        d.pop("workdir")
        d["data"] = [e["dst"] for e in d["data"]]
        if self.requirements:
            d["requirements"] = Path(self.requirements).name
        d["notify"] = notify_secrets(self.notify)[0]  # literal secrets go to the 0600 secrets file
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


def _to_python(node: yaml.Node, path: tuple, marks: dict[tuple, Mark], source: str) -> Any:
    marks[path] = f"{source}:{node.start_mark.line + 1}:{node.start_mark.column + 1}"
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        for knode, vnode in node.value:
            key = yaml.safe_load(yaml.serialize(knode)) if not isinstance(knode, yaml.ScalarNode) else knode.value
            marks[path + (key,)] = f"{source}:{knode.start_mark.line + 1}:{knode.start_mark.column + 1}"
            if key in out:
                raise SpecError(f"{marks[path + (key,)]}: key {key!r} appears twice", "keep one of them")
            out[key] = _to_python(vnode, path + (key,), marks, source)
            marks[path + (key,)] = f"{source}:{knode.start_mark.line + 1}:{knode.start_mark.column + 1}"
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(v, path + (i,), marks, source) for i, v in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node))


def load_yaml(text: str, source: str) -> tuple[Any, dict[tuple, Mark]]:
    """Parse YAML keeping each key's position; syntax errors become ``SpecError``."""
    marks: dict[tuple, Mark] = {}
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        m = e.problem_mark
        pos = f"{source}:{m.line + 1}:{m.column + 1}" if m else source
        raise SpecError(f"{pos}: not valid YAML: {e.problem}", "fix the YAML syntax at that line") from None
    if node is None:
        return {}, marks
    return _to_python(node, (), marks, source), marks


def _suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else f" (known keys: {', '.join(sorted(known))})"


def _check_keys(ctx: _Ctx, path: tuple, d: dict, known: list[str]) -> None:
    for k in d:
        if k not in known:
            ctx.err(path + (k,), f"unknown key {k!r}{_suggest(str(k), known)}")


def _want(ctx: _Ctx, path: tuple, value: Any, kind: type | tuple, what: str) -> bool:
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        ok = False
    else:
        ok = isinstance(value, kind)
    if not ok:
        ctx.err(path, f"expected {what}, got {type(value).__name__} {value!r}")
    return ok


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


def _duration(ctx: _Ctx, path: tuple, value: Any) -> float:
    try:
        return parse_duration(value)
    except ValueError as e:
        ctx.err(path, str(e))
        return 0.0


TOP_KEYS = [
    "name", "host", "workdir", "exclude", "data", "setup", "requirements", "python", "run",
    "env", "secrets", "gpus", "checkpoint", "tensorboard", "retry", "stop", "notify", "autostop",
    "launcher", "nodes", "runtime",
]
RETRY_ON = ["error", "oom", "nan", "nccl", "signal"]
# Validators of sections that other modules own (notifications, auto-stop): name -> fn(dict) -> errors.
SECTION_VALIDATORS: dict[str, Callable[[Any], list[str]]] = {}


def _register_remote_validators() -> None:
    """``notify:`` and ``autostop:`` are checked by the agent's own modules (one set of rules)."""
    from gpujob.bundle import import_remote

    SECTION_VALIDATORS.setdefault("notify", import_remote("notify").validate_channels)
    SECTION_VALIDATORS.setdefault("autostop", import_remote("autostop").validate)


def notify_secrets(notify: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(``notify`` with each literal secret replaced by ``${GPUJOB_NOTIFY_..}``, {name: value})."""
    from gpujob.bundle import import_remote

    return import_remote("notify").externalize_secrets(notify)


def validate(raw: Any, marks: dict[tuple, Mark], source: str, base_dir: Path) -> JobSpec:
    """Check every key and type; raise one ``SpecError`` listing every problem found."""
    ctx = _Ctx(marks)
    if not isinstance(raw, dict):
        raise SpecError(f"{source}: a job file is a mapping of keys (name:, run:, ...)", "see docs/job-spec.md")
    _check_keys(ctx, (), raw, TOP_KEYS)
    run = raw.get("run")
    if run is None:
        ctx.err((), "missing required key 'run' (the command that trains, e.g. run: python train.py)")
        run = ""
    elif isinstance(run, list):
        run = "\n".join(_str_list(ctx, ("run",), run))
    elif _want(ctx, ("run",), run, str, "a shell command"):
        run = run.strip()
    workdir = raw.get("workdir", ".")
    if not _want(ctx, ("workdir",), workdir, str, "a folder path"):
        workdir = "."
    wd = (base_dir / Path(workdir).expanduser()).resolve()
    if not wd.is_dir():
        ctx.err(("workdir",), f"folder {wd} does not exist")
    name = raw.get("name", wd.name)
    if _want(ctx, ("name",), name, str, "a name") and not _NAME_RE.match(name):
        ctx.err(("name",), f"{name!r}: use letters, digits, '.', '_' and '-' (at most 63)")
    host = raw.get("host")
    if host is not None:
        _want(ctx, ("host",), host, str, "a host profile name")
    exclude = _str_list(ctx, ("exclude",), raw.get("exclude", []))

    data: list[DataEntry] = []
    for i, item in enumerate(raw.get("data") or []):
        p = ("data", i)
        if isinstance(item, str):
            item = {"src": item}
        if not _want(ctx, p, item, dict, "{src: local path, dst: path on the instance}"):
            continue
        _check_keys(ctx, p, item, ["src", "dst"])
        src = item.get("src")
        if not _want(ctx, p + ("src",), src, str, "a local path"):
            continue
        srcp = (base_dir / Path(src).expanduser()).resolve()
        if not srcp.exists():
            ctx.err(p + ("src",), f"{srcp} does not exist")
        dst = str(item.get("dst") or srcp.name)
        if dst.startswith("/") or ".." in Path(dst).parts:
            ctx.err(p + ("dst",), f"{dst!r} must be a relative path under the data folder")
        data.append(DataEntry(src=str(srcp), dst=dst))
    if "data" in raw and not isinstance(raw["data"], (list, type(None))):
        ctx.err(("data",), "expected a list of {src, dst}")

    setup = raw.get("setup")
    if isinstance(setup, list):
        setup = "\n".join(_str_list(ctx, ("setup",), setup))
    elif setup is not None and not _want(ctx, ("setup",), setup, str, "shell commands"):
        setup = None
    req = raw.get("requirements")
    if req is not None and _want(ctx, ("requirements",), req, str, "a file path"):
        rp = (wd / req).resolve()
        if not rp.is_file():
            ctx.err(("requirements",), f"{rp} does not exist")
        req = str(rp)
    python = raw.get("python")
    if python is not None:
        _want(ctx, ("python",), python, str, "an interpreter: a path, 'conda:NAME' or 'venv'")

    env: dict[str, str] = {}
    if _want(ctx, ("env",), raw.get("env", {}), dict, "a mapping NAME: value"):
        for k, v in (raw.get("env") or {}).items():
            if not _ENV_RE.match(str(k)):
                ctx.err(("env", k), f"{k!r} is not a valid variable name")
            elif isinstance(v, (dict, list)):
                ctx.err(("env", k), "expected a string or number")
            else:
                env[str(k)] = "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
    secrets = _str_list(ctx, ("secrets",), raw.get("secrets", []))
    for i, s in enumerate(secrets):
        if not _ENV_RE.match(s):
            ctx.err(("secrets", i), f"{s!r} is not a valid variable name")

    gpus = raw.get("gpus")
    if gpus is not None and not (gpus == "all" or (isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 0)):
        ctx.err(("gpus",), f"expected a number of GPUs or 'all', got {gpus!r}")

    keep = 3
    ck = raw.get("checkpoint", {}) or {}
    if _want(ctx, ("checkpoint",), ck, dict, "{keep: N}"):
        _check_keys(ctx, ("checkpoint",), ck, ["keep", "dir", "pattern"])
        ckdir = ck.get("dir")
        if ckdir is not None and _want(ctx, ("checkpoint", "dir"), ckdir, str, "a folder"):
            rel = Path(ckdir)
            if not (ckdir.startswith("/") or ckdir.startswith("~")) and (".." in rel.parts or not rel.parts
                                                                          or rel.parts == (".",)):
                ctx.err(("checkpoint", "dir"), "a relative folder must lie inside the code (no '..'), e.g. outputs; "
                        "for storage every node sees give an absolute path such as /root/autodl-fs/ckpt")
        pat = ck.get("pattern")
        if pat is not None and _want(ctx, ("checkpoint", "pattern"), pat, str, "a glob such as '*.pt'"):
            if pat.startswith("/") or ".." in Path(pat).parts:
                ctx.err(("checkpoint", "pattern"), "a glob relative to the checkpoint folder, e.g. '*.pt' or "
                        "'version_*/checkpoints/*.ckpt'")
        keep = ck.get("keep", 3)
        if _want(ctx, ("checkpoint", "keep"), keep, int, "a number") and keep < 1:
            ctx.err(("checkpoint", "keep"), "keep at least 1 checkpoint")
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
        _check_keys(ctx, ("retry",), rr, ["max_restarts", "on", "backoff", "on_oom"])
        mr = rr.get("max_restarts", 0)
        if _want(ctx, ("retry", "max_restarts"), mr, int, "a number"):
            retry.max_restarts = mr
        if "on" in rr:
            retry.on = _str_list(ctx, ("retry", "on"), rr["on"])
            for i, o in enumerate(retry.on):
                if o not in RETRY_ON:
                    ctx.err(("retry", "on", i), f"unknown cause {o!r}{_suggest(o, RETRY_ON)}")
        if "backoff" in rr:
            retry.backoff = _duration(ctx, ("retry", "backoff"), rr["backoff"])
        oo = rr.get("on_oom", "retry")
        if oo not in ("retry", "halve_batch"):
            ctx.err(("retry", "on_oom"), f"expected 'retry' or 'halve_batch', got {oo!r}")
        retry.on_oom = oo
    grace = 120.0
    st = raw.get("stop", {}) or {}
    if _want(ctx, ("stop",), st, dict, "{grace: 120s}"):
        _check_keys(ctx, ("stop",), st, ["grace"])
        if "grace" in st:
            grace = _duration(ctx, ("stop", "grace"), st["grace"])

    auto = True
    rt = raw.get("runtime", {}) or {}
    if _want(ctx, ("runtime",), rt, dict, "{auto: false}"):
        _check_keys(ctx, ("runtime",), rt, ["auto"])
        auto = rt.get("auto", True)
        _want(ctx, ("runtime", "auto"), auto, bool, "true or false")

    launcher = raw.get("launcher", "none")
    if launcher not in ("none", "torchrun"):
        ctx.err(("launcher",), f"expected 'torchrun' or 'none', got {launcher!r}")
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
        if _want(ctx, (sec,), val, dict, "a mapping"):
            sections[sec] = val
            validator = SECTION_VALIDATORS.get(sec)
            for msg in validator(val) if validator else []:
                ctx.err((sec,), msg)

    if ctx.errors:
        raise SpecError(
            f"{len(ctx.errors)} problem(s) in {source}:\n  " + "\n  ".join(ctx.errors),
            "fix the job file (see docs/job-spec.md); nothing was sent",
        )
    return JobSpec(
        name=name, run=run, workdir=str(wd), host=host, exclude=exclude, data=data, setup=setup,
        requirements=req, python=python, env=env, secrets=secrets, gpus=gpus, checkpoint_keep=keep,
        tensorboard_logdir=logdir, retry=retry, stop_grace=grace, notify=sections.get("notify", {}),
        autostop=sections.get("autostop", {}), launcher=launcher, nodes=nodes,
        runtime_auto=auto is not False,
        checkpoint_dir=(ck.get("dir") if isinstance(ck, dict) else None),
        checkpoint_pattern=(ck.get("pattern") if isinstance(ck, dict) else None), source=source,
    )


def apply_overrides(raw: Any, marks: dict[tuple, Mark], overrides: list[str]) -> Any:
    """Apply ``--set a.b=value`` (value read as YAML) on the raw tree."""
    if not isinstance(raw, dict):
        raw = {}
    for item in overrides:
        if "=" not in item:
            raise SpecError(f"--set {item!r}: expected KEY=VALUE", "e.g. --set retry.max_restarts=3")
        key, _, text = item.partition("=")
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise SpecError(f"--set {item!r}: empty key", "e.g. --set gpus=2")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            value = text
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
            raise SpecError("no job file given and no job.yaml here", "pass one (gpujob submit job.yaml) or write one with gpujob init")
    p = Path(path)
    if run is not None and not p.exists():
        raw: Any = {"run": run}
        marks: dict[tuple, Mark] = {}
        source, base = "<command line>", Path.cwd()
    else:
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SpecError(f"job file {p} not found", "check the path, or create one with gpujob init") from None
        except UnicodeDecodeError:
            raise SpecError(f"{p} is not UTF-8 text", "save the job file as UTF-8") from None
        source, base = str(p), p.resolve().parent
        raw, marks = load_yaml(text, source)
    raw = apply_overrides(raw, marks, overrides or [])
    return validate(raw, marks, source, base)
