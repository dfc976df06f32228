"""What a pull brings: the pull manifest of a job (everything, the newest complete checkpoint or the best
one, filtered by include globs), the checkpoints it leaves out, checkpoints the job wrote in its code
folder (with the next step), the model saved at the end when there is no checkpoint, the kept copy of
one cut short; and the job's checkpoint link, followed, with links into the job made relative.
``transfer`` sends what this selects."""

import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Set

from remote.ckpt import checkpoints
from remote.ckpt.checkpoints.strays import Artifact
from remote.core.layout import JobDir, read_doc, read_json
from remote.core.spec import JobSpec
from remote.data.pathglob import literal, matcher, tops
from remote.stream import tree

LOGS = ["output.log", "metrics.jsonl", "events.jsonl", "status.json"]
PRIVATE = ("secrets.json",)  # the job's secret values: in no pull, whatever --include says
NOT_OUTPUTS = ("__pycache__", "node_modules", "site-packages", "wandb", "data", "datasets")  # not searched for strays


def appended_only(rel: str) -> bool:
    """A log, or a TensorBoard event file: only ever appended to (a reader skips a torn last record),
    so any moment's copy is a true one and a pull never waits for the job to close it."""
    return rel.split("/")[0] in LOGS or ".tfevents." in rel.rsplit("/", 1)[-1]


def _pattern(job_path: Path) -> Optional[str]:
    """The job's ``checkpoint.pattern`` (spec.json, read through JobSpec)."""
    return JobSpec(read_doc(job_path / "spec.json")).checkpoint.pattern


def _found(job_path: Path) -> List[Any]:
    """The job's checkpoints of every kind (spec's checkpoint.pattern), completeness decided with
    the job's own processes as the writers."""
    from remote.core import procs

    return checkpoints.find(job_path / "ckpt", _pattern(job_path),
                            lambda: procs.job_pids(job_path.name, job_dir=str(job_path)))


def _chosen(job_path: Path, what: str, metric: Optional[str], found: List[Any]) -> Optional[Path]:
    """The newest complete checkpoint, or the best (see checkpoints.best): trainer_state.json's best, a
    monitored value in Lightning names, or ``metric`` in the job's metric history at each one's step."""
    if what == "latest":
        for c in reversed(found):
            if c.complete:
                return c.path
        return None
    own = _runtime_best(job_path, metric)
    if own is not None:
        return own
    c = checkpoints.best(found, metric, job_path)
    return c.path if c else None


def _runtime_best(job_path: Path, metric: Optional[str]) -> Optional[Path]:
    """``ckpt/best``, which the runtime helper's ``save_best`` writes atomically with ``best.json``
    (step, metric, value; the seq-cls template's): the job's own word on its best checkpoint,
    unless another ``metric`` is asked for."""
    folder = job_path / "ckpt" / "best"
    info = read_json(folder / "best.json", None)
    if not isinstance(info, dict) or (metric and info.get("metric") != metric):
        return None
    return folder


def _other_checkpoints(job_path: Path, found: List[Any], chosen: Path) -> List[str]:
    """The checkpoints a ``--latest``/``--best`` pull leaves out (paths under ``ckpt/``): all but the chosen
    one. Everything else in the folder comes along: the final model a script saves beside its checkpoints
    (``trainer.save_model()``, accelerate's ``save_model``), results files, Lightning's ``hparams.yaml``."""
    base = job_path / "ckpt"
    keep = {chosen, chosen.resolve()}
    return [c.path.relative_to(base).as_posix() for c in found
            if c.path not in keep and c.path.resolve() not in keep]


def stray_checkpoints(job_path: Path, limit: int = 20) -> List[str]:
    """Checkpoints the job wrote in its code folder outside its checkpoint folder (``code/...``):
    Lightning's default ``lightning_logs/version_N/checkpoints/``, an HF ``output_dir="outputs"``
    without ``checkpoint.dir``. gpujob neither resumes from, rotates nor pulls those by itself; the
    pull names them with the next step. Only files newer than the job's first start count (the synced
    code keeps its own times); see ``checkpoints.stray_paths``."""
    code = job_path / "code"
    attempts = JobDir(job_path).record().attempts or [{}]
    since = float(attempts[0].get("started_at") or 0)
    if not since or not code.is_dir() or code.is_symlink():
        return []
    out = []  # type: List[str]
    for p in checkpoints.stray_paths(code, since, job_path / "ckpt", _pattern(job_path)):
        try:
            rel = "code/" + p.relative_to(code).as_posix()
        except ValueError:
            continue  # deep in ckpt/: a pull brings it with the folder
        if rel not in out:
            out.append(rel)
        if len(out) >= limit:
            break
    return out


def stray_hint(stray: List[str]) -> str:
    """The next step for checkpoints written outside the checkpoint folder."""
    top = stray[0].split("/")[1] if stray[0].count("/") > 1 else ""
    fix = "add `checkpoint: {{dir: {}}}` to the job file".format(top) if top else \
        "have the script write them into $GPUJOB_CKPT_DIR"
    return ("the job wrote checkpoints in its code folder, outside its checkpoint folder, not pulled ({}{}): "
            "fetch them with --include '{}*'; for resume, rotation and --latest, {}".format(
                stray[0], " and {} more".format(len(stray) - 1) if len(stray) > 1 else "",
                "code/" + top + "/" if top else stray[0], fix))


def select(job_path: Path, what: str = "all", metric: Optional[str] = None,
           include: Optional[List[str]] = None) -> Mapping[str, object]:
    """The pull manifest of a job: ``what`` is all, latest or best; ``include`` globs
    (remote/data/pathglob.py) reach every file of the job folder but its secrets (the code folder,
    ``tb/``, event files wherever the script wrote them) and keep what they match."""
    roots = [n for n in LOGS]
    if include:
        roots += _other_roots(job_path, roots, tops(include))
    stray = stray_checkpoints(job_path)
    chosen = note = None  # type: Optional[str]
    skip = []  # type: List[str]  # under ckpt/: the checkpoints not chosen
    found = []  # type: List[Any]
    sources: Dict[str, Path] = {}  # ckpt/<rel> -> the kept copy sent under that name
    if what == "all":
        roots.append("ckpt")
    else:
        found = _found(job_path)
        p = _chosen(job_path, what, metric, found)
        if what == "latest":
            p, note, sources = _kept_instead(job_path, p, note)
        arts = final_artifacts(job_path) if p is None and what == "latest" else []
        if arts:  # no checkpoint, but the model the script saved at its end: that is what to bring
            roots += [] if "code" in roots else ["code"]
            include = (include or []) + ["code/" + literal(a["name"]) for a in arts] + ["/" + n for n in LOGS]
            note = ("the job wrote no checkpoint gpujob knows; brought the model file(s) it saved in its working "
                    "folder instead ({}), its final state rather than one to resume from").format(
                        ", ".join("code/" + a["name"] for a in arts))
        elif p is None:
            return {"error": "no {} checkpoint".format("complete" if what == "latest" else "best (by {})".format(
                metric or "trainer_state.json, a model_best/best file, a monitored value in the names, or eval_loss")), "stray": stray}
        if p is not None:
            if p.is_symlink() and p.resolve().parent == p.parent.resolve():
                p = p.parent / os.readlink(str(p))  # Lightning's last.ckpt as a link: the file it names
            chosen = "ckpt/" + p.relative_to(job_path / "ckpt").as_posix()
            roots.append("ckpt")
            skip = _other_checkpoints(job_path, found, p)
            state = JobDir(job_path).record().state
            if state in ("stopped", "autostopped"):  # an HF example writes its "final" model on the way out
                note = ("the job was {} before its end: a final model or results file beside the checkpoint "
                        "is its state at the stop, not a finished training's").format(state)
    files = {}  # type: Dict[str, Optional[List[Any]]]  # (None: a kept copy gone, its name not listed)
    dirs = []  # type: List[str]
    real = ckpt_target(job_path)
    for r in roots:
        t = tree(real if r == "ckpt" and real else job_path / r)
        if not t["exists"]:
            continue
        only = _ckpt_only(job_path, real, found if what != "all" else None) if r == "ckpt" else None
        for rel, v in t["files"].items():
            name = r + ("/" + rel if rel else "")
            if skip and r == "ckpt" and _under(rel, skip) or only is not None and not _under(rel, only):
                continue
            files[name] = entry = v[:4]
            if v[3] is not None:  # as send_list will send it
                entry[3] = portable_link(job_path, job_path / name, v[3])
        dirs += [r + "/" + d for d in t["dirs"] if not (skip and r == "ckpt" and _under(d, skip))
                 and (only is None or any(x.startswith(d + "/") for x in only))]
        if (job_path / r).is_dir() and (not (job_path / r).is_symlink() or r == "ckpt"):
            dirs.append(r)
    for name, kept in sources.items():  # the copy under the file's own name
        files[name] = tree(kept)["files"].get("", [])[:4] or files.get(name)
    if include:
        keep = matcher(include)
        files = {k: v for k, v in files.items() if keep(k)}
        stray = [x for x in stray if not keep(x)]  # asked for: nothing to say about them
        dirs = [d for d in dirs if keep(d) or any(k.startswith(d + "/") for k in files)]
    return {"files": files, "dirs": sorted(set(dirs)), "selected": chosen, "stray": stray,
            "stray_hint": stray_hint(stray) if stray else None, "note": note,
            "sources": {k: str(v.relative_to(job_path)) for k, v in sources.items() if k in files}}


def _other_roots(job_path: Path, roots: List[str], only: Optional[Set[str]]) -> List[str]:
    """The job folder's other entries an ``--include`` reaches (never its secrets, nor a lock;
    ``ckpt`` as ``select``'s ``what`` chooses): those named in ``only`` when it is a set."""
    try:
        names = sorted(os.listdir(str(job_path)))
    except OSError:
        return []
    return [n for n in names if n not in roots and n != "ckpt" and n not in PRIVATE and not n.endswith(".lock")
            and (only is None or n in only)]


def _kept_instead(job_path: Path, chosen: Optional[Path], note: Optional[str]) -> Any:
    """(chosen, note, {ckpt/<rel>: kept copy}): a checkpoint file rewritten in place whose newest save was
    cut short is its last complete version, kept by the agent (remote/ckpt/keepcopy.py), when that is newer
    than ``chosen``."""
    from remote.ckpt import keepcopy

    try:
        subs = keepcopy.stand_ins(job_path)
    except OSError:
        return chosen, note, {}
    if not subs:
        return chosen, note, {}
    name, (kept, rec) = max(subs.items(), key=lambda kv: kv[1][1].get("mtime_ns") or 0)
    try:
        if chosen is not None and os.stat(str(chosen)).st_mtime_ns >= int(rec.get("mtime_ns") or 0):
            return chosen, note, {}
    except OSError:
        pass
    step = rec.get("step")
    said = ("{} is cut short (a save in place that was interrupted) or gone: brought the copy gpujob kept of its "
            "last complete version{} under its name").format(name, " (step {})".format(step) if isinstance(step, int) else "")
    return job_path / name, (note + "; " + said) if note else said, {name: kept}


def final_artifacts(job_path: Path) -> List[Artifact]:
    """The model files the job saved in its working folder that are no checkpoint (see
    ``checkpoints.artifacts``), newest first."""
    st = JobDir(job_path).record()
    since = float(st.started_at or st.submitted_at or 0)
    if not since or not (job_path / "code").is_dir():
        return []
    return checkpoints.artifacts(job_path / "code", since, job_path / "ckpt", _pattern(job_path))


def ckpt_target(job_path: Path) -> Optional[Path]:
    """Where ``<job>/ckpt`` leads when it is a link (``checkpoint.dir: .`` links it to the code, an
    absolute ``checkpoint.dir`` to shared storage): pull lists and sends that folder's files as
    ``ckpt/...``, so the laptop gets the checkpoints themselves, not a link that dangles there."""
    link = job_path / "ckpt"
    if not link.is_symlink():
        return None
    real = link.resolve()
    return real if real.is_dir() else None


def _ckpt_only(job_path: Path, real: Optional[Path], found: Optional[List[Any]]) -> Optional[List[str]]:
    """With ``ckpt`` linked to the job's code folder (``dir: .``), only the checkpoints (the spec's
    pattern) count as the checkpoint folder's files: the code is not the job's output."""
    if real is None or real != (job_path / "code").resolve():
        return None
    if found is None:
        found = checkpoints.find(job_path / "ckpt", _pattern(job_path), check=False)
    return [c.rel(job_path / "ckpt") for c in found]


def _under(rel: str, paths: List[str]) -> bool:
    return any(rel == p or rel.startswith(p + "/") for p in paths)


def portable_link(base: Path, link_path: Path, target: str) -> str:
    """An absolute link into the job folder (``ckpt/latest -> <job>/ckpt/step-1``) as a
    relative one, which still holds in the laptop's copy; other links as they are."""
    if not target.startswith("/"):
        return target
    t = os.path.normpath(target)
    root = str(base.resolve())
    for prefix in (os.path.normpath(str(base)), root):
        if t == prefix or t.startswith(prefix + "/"):
            return os.path.relpath(root + t[len(prefix):], str(link_path.parent.resolve()))
    return target
