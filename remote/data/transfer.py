"""Moving trees in one round trip: a manifest out, a verified stream in, a verified stream out.

The stream format, part files and content hashes are in ``remote/stream/``. The agent keeps
a hash cache (``<root>/cache/hashes.json``) filled by every received file, so a manifest with
hashes costs no rereading of data it received itself.
"""

import fnmatch
import json
import os
import stat
from pathlib import Path, PurePosixPath
from typing import IO, Any, Dict, List, Optional

from remote.ckpt import checkpoints
from remote.core import atomicfile, layout
from remote.core.layout import read_doc, read_json
from remote.stream import (
    CHUNK,
    HashCache,
    Item,
    delete_paths,
    fill_hashes,
    find_stamp,
    matching_prefix,
    read_items,
    tree,
    tree_digest,
    write_items,
)

LOGS = ["output.log", "metrics.jsonl", "events.jsonl", "status.json"]
NOT_OUTPUTS = ("__pycache__", "node_modules", "site-packages", "wandb", "data", "datasets")  # not searched for strays


def hash_cache(root: Path) -> HashCache:
    return HashCache(root / "cache" / "hashes.json")


def manifest(base: Path, cache: Optional[HashCache] = None, hash_all: bool = False) -> Dict[str, Any]:
    """{"files": {rel: [size, mtime_ns, mode, link, hash]}, "dirs": [...], "parts": {rel: chunks}}."""
    return tree(base, cache, hash_all)


def receive(base: Path, stream: IO[bytes], cache: Optional[HashCache] = None) -> Dict[str, Any]:
    """Apply an upload stream under ``base`` (symlinks may point anywhere: they are the user's);
    then a detached ``reseal`` brings the changed trees' seals up to date, so the next no-op's
    manifest is the fast one."""
    try:
        res = read_items(base, stream, links_out=True, cache=cache)
    finally:
        spawn_reseal(base)
    return res


def spawn_reseal(root: Path) -> None:
    import subprocess
    import sys

    agent = str(layout.AGENT_DIR)
    try:
        subprocess.Popen([sys.executable, "-S", "-m", "remote", "--root", str(root), "reseal"], cwd=agent,
                         env=dict(os.environ, PYTHONPATH=agent), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except OSError:
        pass  # only speed is lost: the next manifest computes the digest itself


def reseal(root: Path) -> Dict[str, Any]:
    """Recompute the seal (stamp and digest) of every known tree whose stamp moved (the
    ``reseal`` verb, started detached after a receive). A tree still racily new is waited for."""
    import time

    seals = read_doc(root / "cache" / "trees.json")
    done = []  # type: List[str]
    todo = sorted(seals)
    for wait in (0.2, 2.1):  # a fine-grained racy window, then a whole-second one
        time.sleep(wait)
        later = []
        for d in todo:
            stamp = find_stamp(root / d)
            seal = seals.get(d)
            if stamp is None:
                later.append(d)
            elif not (isinstance(seal, list) and seal[0] == stamp):
                manifest_doc(root, [d], [])  # walks, reads the hash cache, stores the seal
                done.append(d)
        todo = later
        if not todo:
            break
    return {"resealed": done}


def delete(base: Path, rels: List[str], cache: Optional[HashCache] = None) -> int:
    return delete_paths(base, rels, cache)


# ---- pull -------------------------------------------------------------------------------
def _found(job_path: Path) -> List[Any]:
    """The job's checkpoints of every kind (spec's checkpoint.pattern), completeness decided with
    the job's own processes as the writers."""
    from remote.core import procs

    spec = read_json(job_path / "spec.json", {}) or {}
    return checkpoints.find(job_path / "ckpt", spec.get("checkpoint_pattern"),
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
    attempts = (read_json(job_path / "status.json", {}) or {}).get("attempts") or [{}]
    since = float(attempts[0].get("started_at") or 0)
    if not since or not code.is_dir() or code.is_symlink():
        return []
    spec = read_json(job_path / "spec.json", {}) or {}
    out = []  # type: List[str]
    for p in checkpoints.stray_paths(code, since, job_path / "ckpt", spec.get("checkpoint_pattern")):
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
           include: Optional[List[str]] = None) -> Dict[str, Any]:
    """The pull manifest of a job: ``what`` is all, latest or best; ``include`` globs filter it
    (a glob under ``code/`` reaches into the job's code folder, for what the script wrote there)."""
    roots = [n for n in LOGS]
    if any(g.startswith("code/") for g in include or []):
        roots.append("code")
    stray = stray_checkpoints(job_path)
    chosen = note = None  # type: Optional[str]
    skip = []  # type: List[str]  # under ckpt/: the checkpoints not chosen
    found = []  # type: List[Any]
    sources = {}  # type: Dict[str, Path]  # ckpt/<rel> -> the kept copy sent under that name
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
            include = (include or []) + ["code/" + a["name"] for a in arts] + LOGS
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
            state = (read_json(job_path / "status.json", {}) or {}).get("state")
            if state in ("stopped", "autostopped"):  # an HF example writes its "final" model on the way out
                note = ("the job was {} before its end: a final model or results file beside the checkpoint "
                        "is its state at the stop, not a finished training's").format(state)
    files = {}  # type: Dict[str, List[Any]]
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
            files[name] = v[:4]
            if v[3] is not None:  # as send_list will send it
                files[name][3] = portable_link(job_path, job_path / name, v[3])
        dirs += [r + "/" + d for d in t["dirs"] if not (skip and r == "ckpt" and _under(d, skip))
                 and (only is None or any(x.startswith(d + "/") for x in only))]
        if (job_path / r).is_dir() and (not (job_path / r).is_symlink() or r == "ckpt"):
            dirs.append(r)
    for name, kept in sources.items():  # the copy under the file's own name
        files[name] = tree(kept)["files"].get("", [])[:4] or files.get(name)
    if include:
        def keep(rel: str) -> bool:
            return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(rel, g.rstrip("/") + "/*") for g in include)
        files = {k: v for k, v in files.items() if keep(k)}
        stray = [x for x in stray if not keep(x)]  # asked for: nothing to say about them
        dirs = [d for d in dirs if keep(d) or any(k.startswith(d + "/") for k in files)]
    return {"files": files, "dirs": sorted(set(dirs)), "selected": chosen, "stray": stray,
            "stray_hint": stray_hint(stray) if stray else None, "note": note,
            "sources": {k: str(v.relative_to(job_path)) for k, v in sources.items() if k in files}}


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


def final_artifacts(job_path: Path) -> List[Dict[str, Any]]:
    """The model files the job saved in its working folder that are no checkpoint (see
    ``checkpoints.artifacts``), newest first."""
    st = read_json(job_path / "status.json", {}) or {}
    since = float(st.get("started_at") or st.get("submitted_at") or 0)
    spec = read_json(job_path / "spec.json", {}) or {}
    if not since or not (job_path / "code").is_dir():
        return []
    return checkpoints.artifacts(job_path / "code", since, job_path / "ckpt", spec.get("checkpoint_pattern"))


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
        spec = read_json(job_path / "spec.json", {}) or {}
        found = checkpoints.find(job_path / "ckpt", spec.get("checkpoint_pattern"), check=False)
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


def send_list(base: Path, wanted: List[Any], out: IO[bytes], write_wait: Optional[float] = None,
              sources: Optional[Dict[str, str]] = None) -> None:
    """Stream ``wanted`` ([rel, prefix_chunks] pairs, or bare rel strings) from ``base``.

    A prefix is honoured only if this side's file starts with the same chunks. With
    ``write_wait`` (a pull), a file some process holds open for writing is waited for that
    long, then left out, as is one that changes while it is read: the end record lists them
    under ``held``, and nothing unfinished arrives as pulled. ``sources``: rel -> the file under ``base``
    sent in its place (the manifest's kept copy of a checkpoint cut short)."""
    places = []  # type: List[Any]
    items = []  # type: List[Item]
    root = base.resolve()
    real = ckpt_target(base)
    for w in wanted:
        rel, prefix = (w, []) if isinstance(w, str) else (w[0], list(w[1] or []))
        p = PurePosixPath(rel)
        if p.is_absolute() or ".." in p.parts or not p.parts:
            continue
        full = base.joinpath(*p.parts)
        inside = root
        if sources and rel in sources and ".." not in PurePosixPath(sources[rel]).parts:
            places.append((rel, prefix, base.joinpath(*PurePosixPath(sources[rel]).parts)))
            continue
        if real is not None and p.parts[0] == "ckpt":  # the job's own checkpoint link is followed
            full, inside = real.joinpath(*p.parts[1:]), real
            if len(p.parts) == 1:
                items.append(Item(rel, full, mode=stat.S_IMODE(os.stat(str(full)).st_mode), is_dir=True))
                continue
        if inside not in full.parent.resolve().parents and full.parent.resolve() != inside:
            continue
        places.append((rel, prefix, full))
    held = {}  # type: Dict[str, Any]
    if write_wait is not None:  # before the files are looked at: what a writer finishes is sent whole
        from remote.ckpt import writing

        # the logs grow by appends while the job runs: any moment's copy of them is a true one
        held = writing.wait_closed([str(f) for r, _, f in places if r.split("/")[0] not in LOGS
                                    and f.is_file() and not f.is_symlink()], write_wait)
    for rel, prefix, full in places:
        if str(full) in held:
            continue
        try:
            st = os.lstat(str(full))
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            items.append(Item(rel, full, link=portable_link(base, full, os.readlink(str(full)))))
        elif stat.S_ISDIR(st.st_mode):
            items.append(Item(rel, full, mode=stat.S_IMODE(st.st_mode), is_dir=True))
        elif stat.S_ISREG(st.st_mode):
            if prefix:
                prefix = matching_prefix(full, prefix, st.st_size)
                if len(prefix) * CHUNK >= st.st_size:
                    prefix = prefix[:max(0, (st.st_size - 1) // CHUNK)]
            items.append(Item(rel, full, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), prefix=prefix))
    if write_wait is None:
        write_items(out, items)
    else:
        write_items(out, items, end={"held": sorted(held_rel(base, held))}, changed=[])


def held_rel(base: Path, held: Dict[str, Any]) -> List[str]:
    """The paths of ``held`` (files under ``base``) relative to it, as the pull names them."""
    return [Path(p).relative_to(base).as_posix() for p in held]


def send(base: Path, members: List[str], out: IO[bytes]) -> None:
    """Stream whole trees ``members`` (relative to ``base``), old-style."""
    wanted = []  # type: List[Any]
    for m in members:
        t = tree(base / m)
        if not t["exists"]:
            continue
        if (base / m).is_dir():
            wanted.append(m)
        wanted += sorted([m + "/" + d for d in t["dirs"]])
        wanted += sorted(m + ("/" + r if r else "") for r in t["files"])
    send_list(base, wanted, out)


def manifest_doc(root: Path, dirs: List[str], hash_dirs: List[str], cache: Optional[HashCache] = None,
                 known: Optional[List[str]] = None, shapes: Optional[List[str]] = None) -> Dict[str, Any]:
    """What is under each of ``dirs`` and ``hash_dirs`` (with content hashes, from the cache, and
    the tree's digest), and the free bytes. ``known`` (``DIR=DIGEST``: what the client's record
    says it left there): a tree whose digest is that one answers ``same`` without its files.

    ``<root>/cache/trees.json`` remembers each tree's stamp (a digest of its stats: GNU find's
    listing where there is one, else the Python walk's) with its content digest: while the stamp
    stays the same the digest is known without the hash cache (and, with find, without a walk
    in Python)."""
    expect = dict(k.split("=", 1) for k in known or [] if "=" in k)
    seeds = dict(k.split("=", 1) for k in shapes or [] if "=" in k)
    if seeds:  # a project's first staging of a data: entry: from one of the same shape already here
        from remote.data import datastore

        cache = cache or hash_cache(root)
        datastore.seed(root, {d: seeds[d] for d in hash_dirs if d in seeds}, cache)
    seals_path = root / "cache" / "trees.json"
    seals = read_doc(seals_path)
    changed = False
    doc = {}  # type: Dict[str, Any]
    for d in dirs + hash_dirs:
        fast = find_stamp(root / d)
        seal = seals.get(d)
        if fast is not None and isinstance(seal, list) and seal[0] == fast and expect.get(d) == seal[1]:
            doc[d] = {"same": True, "digest": seal[1], "parts": {}, "exists": True}  # no walk in Python
            continue
        t = manifest(root / d)
        stamp = fast or t.pop("stamp", None)
        t.pop("stamp", None)
        digest = seal[1] if stamp is not None and isinstance(seal, list) and seal[0] == stamp else None
        if digest is None or expect.get(d) != digest:  # the files go back: with their hashes
            cache = cache or hash_cache(root)
            fill_hashes(root / d, t, cache, True)
            digest = tree_digest(t["files"], t["dirs"])
            if stamp is not None and digest is not None:
                seals[d] = [stamp, digest]
                changed = True
            elif d not in seals:  # known now: the reseal after a receive looks at it
                seals[d] = [None, None]
                changed = True
        t.pop("inos", None)
        t["digest"] = digest
        if digest is not None and expect.get(d) == digest:
            t = {"same": True, "digest": digest, "parts": t["parts"], "exists": t["exists"]}
        doc[d] = t
    if cache is not None:
        cache.save()
    if changed:  # under the file's lock, over what others sealed meanwhile: only this walk's trees change
        mine = {d: seals[d] for d in dirs + hash_dirs if d in seals}
        seals_path.parent.mkdir(parents=True, exist_ok=True)
        atomicfile.update_json(seals_path, lambda doc: doc.update(mine), durable=False)
    st = os.statvfs(str(root))
    doc["free_bytes"] = st.f_bavail * st.f_frsize
    return doc


def session(root: Path, dirs: List[str], hash_dirs: List[str], stdin: IO[bytes], stdout: IO[bytes],
            known: Optional[List[str]] = None, shapes: Optional[List[str]] = None) -> Dict[str, Any]:
    """Manifest and receive over one exec channel: write the manifest as one JSON line, then
    apply the stream that follows on stdin (none = nothing to do). Returns the receive result."""
    doc = manifest_doc(root, dirs, hash_dirs, None, known, shapes)
    stdout.write(json.dumps(doc).encode() + b"\n")
    stdout.flush()
    first = stdin.read(1)
    if not first:
        return {"written": 0, "deleted": 0, "bytes": 0}
    return receive(root, _Prepend(first, stdin), hash_cache(root))


class _Prepend:
    """A read-only stream with ``head`` put back in front of ``rest``."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self.head, self.rest = head, rest

    def read(self, n: int = -1) -> bytes:
        if self.head:
            h, self.head = self.head, b""
            if n is None or n < 0:
                return h + self.rest.read()
            return h + self.rest.read(n - len(h)) if n > len(h) else h
        return self.rest.read(n)

    def read1(self, n: int = -1) -> bytes:
        if self.head:
            h, self.head = self.head, b""
            return h
        read1 = getattr(self.rest, "read1", None)
        return read1(n) if read1 else self.rest.read(n)
