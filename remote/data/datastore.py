"""The data store: ``data:`` files kept by content, and each job's own, unchanging view of them.

A submit syncs its ``data:`` entries into its project's staging folder
(``<root>/projects/<project>/data/<dst>``), under the project's sync lease like its code. When
the job is created (``jobs.submit``, still under that lease) every staged file is linked into
the store under its content hash (``<root>/store/<h[:2]>/<h>``, write bits off) and the job's
view ``<job>/data/<dst>`` is made of hard links to those blobs; where the filesystem refuses a
hard link the blob is a copy and the view a symlink to it (a read-only link farm). A later
sync replaces a staged file by a rename (a new inode), so nothing a job sees changes under it,
whatever another project or a later submit sends. Identical bytes are one blob however many
jobs and projects use them (a staged file whose bytes are stored already is replaced by a link
to that blob). ``<job>/data.refs`` names the blobs a job uses; ``gc`` deletes the blobs that no
kept job names (``unused``), under the store's lock that a job's view is built under.

A blob is trusted by its name only while its fingerprint holds (remote/data/blobcheck.py): a
job running as root can rewrite its view's files in place, which rewrites the blob. A blob
found changed is hashed again; one whose bytes no longer match its name leaves the store and is
stored again from the staged bytes, and a staged file that is such a blob is reported to the
sync by its real hash (``recheck_staged``), so the laptop sends its bytes again.
"""

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple, TypedDict

from remote.core import locks
from remote.core.errors import AgentError
from remote.data import blobcheck
from remote.stream.hashing import HashCache, file_hash
from remote.stream.tree import Tree

REFS = "data.refs"
VIEW = "data"


def store_dir(root: Path) -> Path:
    return root / "store"


def staging(root: Path, project: str) -> Path:
    """Where a project's ``data:`` entries are synced to (the sync's ``already there`` compares with it)."""
    return root / "projects" / project / "data"


def blob_name(h: str, mode: int) -> str:
    """A blob's name: its content hash, ``.x`` when executable (a stored file keeps its mode)."""
    return h + (".x" if mode & 0o111 else "")


def blob_path(root: Path, name: str) -> Path:
    return store_dir(root) / name[:2] / name


def seed(root: Path, shapes: Dict[str, str], cache: HashCache) -> None:
    """Before a manifest: a project's ``data:`` entry not staged yet (``shapes``: tree -> the
    laptop's ``datashape.shape`` of it) starts as hard links to another project's entry of the
    same ``dst`` and the same shape (or one an agent before the store left in ``<root>/data``),
    with their cached hashes. The manifest then compares content as usual, so bytes already on
    the host are not sent again and any that differ are; the caller holds this project's sync
    lease, so no other submit writes here. Same names and sizes: no file the laptop lacks is left."""
    for t, want in shapes.items():
        parts = t.split("/")
        if len(parts) < 4 or parts[0] != "projects" or parts[2] != "data" or ".." in parts:
            continue
        target = root / t
        if os.path.lexists(str(target)):
            continue
        src = _seed_source(root, parts[1], "/".join(parts[3:]), want)
        if src is not None:
            _seed_from(root, src, target, cache)


def _seed_source(root: Path, project: str, dst: str, want: str) -> Optional[Path]:
    """The newest staged entry ``dst`` of another project whose shape is ``want``."""
    from remote.data.datashape import shape

    found = []  # type: List[Any]
    top = root / "projects"
    for p in [root / "data" / dst] + [d / "data" / dst for d in (top.iterdir() if top.is_dir() else [])
                                        if d.name != project]:
        try:
            found.append((os.lstat(str(p)).st_mtime, str(p)))
        except OSError:
            continue
    for _, p in sorted(found, reverse=True):
        if shape(p) == want:
            return Path(p)
    return None


def _seed_from(root: Path, src: Path, target: Path, cache: HashCache) -> None:
    tmp = target.with_name(".{}.{}.seed".format(target.name, os.getpid()))
    links = []  # type: List[Any]  # (file under tmp, its path once renamed, its source, its stat before the link)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            return
        if src.is_file():
            before = os.lstat(str(src))
            os.link(str(src), str(tmp))
            links.append((tmp, target, src, before))
        else:
            for p, place, rel in _mirror_walk(str(src), str(tmp)):
                before = os.lstat(p)
                os.link(p, place)
                links.append((place, target / rel, Path(p), before))
        os.rename(str(tmp), str(target))
    except OSError:  # no hard links here, or the source changed as it was read: the sync sends it all
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(str(tmp), ignore_errors=True)
        else:
            _unlink(tmp)
        return
    pr = blobcheck.prints(root)
    for _, final, source, before in links:  # the same inodes: their hashes hold under the new names
        try:
            st = os.lstat(str(final))
        except OSError:
            continue
        h = cache.get(source, st)
        if h is not None:
            cache.put(final, h, st)
            _relinked(pr, str(blob_path(root, blob_name(h, st.st_mode))), h, before)
    pr.save()


def _relinked(pr: blobcheck.Prints, blob: str, h: str, before: os.stat_result) -> None:
    """After a link to a file that may be ``blob``: its print follows the ctime the link moved,
    where the print held before it (the file was that blob, unchanged)."""
    if pr.get(blob, before) == h:  # type: ignore[arg-type]
        blobcheck.relinked(pr, blob, h, before)


def build_view(root: Path, project: str, dsts: List[str], job_path: Path, cache: HashCache) -> List[str]:
    """Make ``<job>/data`` (always, empty without ``data:``) from the project's staged entries
    ``dsts``; write and return the blob names it uses. The caller holds the project's lock."""
    view = job_path / VIEW
    view.mkdir(parents=True, exist_ok=True)
    used = []  # type: List[str]
    src_top = staging(root, project)
    pr = blobcheck.prints(root)
    try:
        with locks.flocked(_lock(root)):  # gc deletes no blob while a view links to it
            for dst in dsts:
                if dst.startswith("/") or ".." in Path(dst).parts:  # the laptop refuses these in the job file
                    continue
                src = src_top / dst
                if not os.path.lexists(str(src)):
                    continue
                _view_of(root, src, view / dst, cache, pr, used)
            _write_refs(job_path, used)
    finally:  # what was checked stays checked, and a damaged file's hash stays dropped
        cache.save()
        pr.save()
    return used


def _lock(root: Path) -> Path:
    d = store_dir(root)
    d.mkdir(parents=True, exist_ok=True)
    return d / ".lock"


def _view_of(root: Path, src: Path, target: Path, cache: HashCache, pr: blobcheck.Prints, used: List[str]) -> None:
    """One staged entry (a file, a folder or a link) as blobs linked under ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        os.symlink(os.readlink(str(src)), str(target))
        return
    store = str(store_dir(root))
    if src.is_file():
        used.append(_place(store, str(src), str(target), cache, pr))
        return
    for p, place, _ in _mirror_walk(str(src), str(target)):
        used.append(_place(store, p, place, cache, pr))


def _mirror_walk(src: str, target: str) -> Iterator[Tuple[str, str, str]]:
    """Make ``target``'s folders and links those of folder ``src``; yield (file, its place under
    ``target``, its name relative to ``src``) for each regular file, for the caller to link.
    Plain strings: this is the per-file path of a submit (a dataset may hold 100,000 files)."""
    for dirpath, dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        here = target if rel == "." else os.path.join(target, rel)
        os.makedirs(here, exist_ok=True)
        for name in dirnames:  # a link to a folder is listed with the folders (os.walk does not enter it)
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                os.symlink(os.readlink(p), os.path.join(here, name))
        for name in filenames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):  # the user's link, as it was sent (it may point anywhere)
                os.symlink(os.readlink(p), os.path.join(here, name))
            else:
                yield p, os.path.join(here, name), name if rel == "." else rel + "/" + name


def _place(store: str, src: str, target: str, cache: HashCache, pr: blobcheck.Prints) -> str:
    st = os.lstat(src)
    name = blob_name(cache.hash(src, st), st.st_mode)  # type: ignore[arg-type]
    h = name.split(".")[0]
    for _ in range(3):
        blob, held = _stored(store, src, st, name, cache, pr)
        try:
            os.link(blob, target)
        except OSError:  # no hard links here (another filesystem, a FUSE mount): a read-only link farm
            os.symlink(blob, target)
            return name
        if blobcheck.relinked(pr, blob, h, held) is not None:
            return name
        os.unlink(target)  # written to as it was linked: checked again (and stored again if damaged)
        st = os.lstat(src)
    raise AgentError("data file {} kept changing on the host while this job's view was built".format(src),
                     "stop the job that writes into its $GPUJOB_DATA_DIR, then submit again", "data_damaged")


def _stored(store: str, src: str, st: os.stat_result, name: str, cache: HashCache,
            pr: blobcheck.Prints) -> Tuple[str, os.stat_result]:
    """The blob of ``src``'s bytes and its stat: the staged file itself when they are new to the
    store, else the blob already there (and the staged file becomes a link to it: one copy on
    disk). A blob there is used only while it is sound; a damaged one leaves the store first."""
    folder = os.path.join(store, name[:2])
    blob = os.path.join(folder, name)
    h = name.split(".")[0]
    try:
        held = os.stat(blob)  # type: Optional[os.stat_result]
    except FileNotFoundError:
        held = None
    if held is not None and not blobcheck.sound(pr, blob, h, held):
        blobcheck.evict(pr, blob, held.st_ino)
        if held.st_ino == st.st_ino:  # the staged file is that inode: no good copy of the bytes is left here
            cache.drop(src)  # the next sync hashes it, and the laptop sends its bytes again
            raise AgentError("data file {} was changed in place on the host (a job wrote into its "
                             "$GPUJOB_DATA_DIR) after it was sent; the changed copy is out of the store "
                             "and no job will be given it".format(src),
                             "submit again: the sync sends the file again", "data_damaged")
        held = None
    if held is not None:
        if held.st_ino != st.st_ino:
            tmp = os.path.join(os.path.dirname(src), ".{}.{}.store".format(os.path.basename(src), os.getpid()))
            try:
                os.link(blob, tmp)
                os.replace(tmp, src)
                cache.put(src, h)  # type: ignore[arg-type]
            except OSError:  # a copy stays staged: it costs space, not correctness
                _unlink(tmp)
            held = blobcheck.relinked(pr, blob, h, held) or held
        return blob, held
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, ".{}.{}.tmp".format(name, os.getpid()))
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copy2(src, tmp)
    os.chmod(tmp, st.st_mode & 0o7555)  # write bits off: a non-root job's view is not for writing
    os.replace(tmp, blob)
    cache.put(src, h)  # type: ignore[arg-type]  # the chmod moved nothing the cache keys on; a copied blob's source
    new = os.stat(blob)
    pr.put(blob, h, new)  # type: ignore[arg-type]
    return blob, new


def recheck_staged(root: Path, base: Path, t: Tree, cache: HashCache) -> None:
    """A staged ``data:`` tree's hashes as the sync reports them (``t``: its ``tree`` with hashes
    and inodes): a file that is a blob's inode whose print moved is hashed again, and one whose
    bytes changed is reported by its real hash (the laptop then sends its bytes again) and its
    blob leaves the store. The hash cache alone keys on size, mtime and inode: a job's same-size
    rewrite with the mtime put back would pass it."""
    pr = blobcheck.prints(root)
    inos = t.get("inos") or {}
    top = str(base)
    for rel, v in t["files"].items():
        if v[3] is not None or v[4] is None:
            continue
        blob = str(blob_path(root, blob_name(v[4], v[2])))
        rec = pr.data.get(blob)
        if rec is not None and rec[2] != inos.get(rel):
            continue  # another inode than the blob: the cache's word holds for it
        full = top + "/" + rel if rel else top
        try:
            st = os.lstat(full)
            if rec is None and os.stat(blob).st_ino != st.st_ino:  # no print: which inode the blob is
                continue
        except OSError:
            continue
        if pr.get(blob, st) == v[4]:  # type: ignore[arg-type]
            continue
        try:
            got = file_hash(Path(full)).hexdigest()
        except OSError:
            continue
        if got == v[4]:
            pr.put(blob, got, st)  # type: ignore[arg-type]
            continue
        v[4] = got
        cache.put(full, got, st)  # type: ignore[arg-type]
        blobcheck.evict(pr, blob, st.st_ino)
    pr.save()


def is_staged(tree_rel: str) -> bool:
    """Whether a synced tree (relative to the root) is a project's staged ``data:`` entry."""
    parts = tree_rel.split("/")
    return len(parts) >= 4 and parts[0] == "projects" and parts[2] == "data"


@contextmanager
def releasing(root: Path, job_path: Path) -> Iterator[None]:
    """Around removing a job's folder: its view's unlinks move its blobs' ctime only, so the
    blobs sound before keep their prints (no full hash at the next use)."""
    pr = blobcheck.prints(root)
    before = []  # type: List[Any]
    for name in refs(job_path) or set():
        blob = str(blob_path(root, name))
        try:
            st = os.stat(blob)
        except OSError:
            continue
        if pr.get(blob, st) == name.split(".")[0]:  # type: ignore[arg-type]
            before.append((blob, name.split(".")[0], st))
    yield
    for blob, h, st in before:
        blobcheck.relinked(pr, blob, h, st)
    pr.save()


def _unlink(p: Any) -> None:
    try:
        os.unlink(str(p))
    except OSError:
        pass


def _write_refs(job_path: Path, used: List[str]) -> None:
    tmp = job_path / (".{}.{}.tmp".format(REFS, os.getpid()))
    with open(str(tmp), "w") as f:
        json.dump(sorted(set(used)), f)
    os.replace(str(tmp), str(job_path / REFS))


def refs(job_path: Path) -> Optional[Set[str]]:
    """The blobs a job's view uses; None when its refs file is unreadable (gc then keeps every blob)."""
    p = job_path / REFS
    if not p.exists():
        return set()
    try:
        with open(str(p)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return {str(x) for x in doc} if isinstance(doc, list) else None


class GcItem(TypedDict, total=False):
    """One thing ``gc`` would remove (remote/jobs/cleanup.py ``plan``): ``blob`` for a store blob,
    ``job_id`` for a job or its checkpoints; ``bytes`` once measured, ``skipped`` when gc kept it."""
    kind: str
    path: str
    blob: str
    job_id: str
    bytes: int
    skipped: str


def unused(root: Path, kept: Set[str]) -> List[GcItem]:
    """gc's items: blobs that no kept job names (``kept``: every name the kept jobs' refs hold)."""
    top = store_dir(root)
    if not top.is_dir():
        return []
    out: List[GcItem] = []
    for sub in sorted(top.iterdir()):
        if not sub.is_dir():
            continue
        for blob in sorted(sub.iterdir()):
            if not blob.name.startswith(".") and blob.name not in kept:
                out.append({"kind": "data", "path": str(blob), "blob": blob.name})
    return out


def remove_unused(root: Path, it: GcItem, still_kept: Any) -> None:
    """Delete one blob of gc's plan unless a job made since the plan uses it (``still_kept()``:
    the names kept jobs use now, read under the store's lock)."""
    with locks.flocked(_lock(root)):
        if it["blob"] in still_kept():
            it["skipped"] = "in use"
            return
        _unlink(Path(it["path"]))
        pr = blobcheck.prints(root)
        pr.drop(it["path"])
        pr.save()
