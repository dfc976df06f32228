"""What a job's TensorBoard serves: every folder under the job where its event files are, found by the
metrics collector's own search (remote/metrics/metricsrc.py ``tb_roots``/``find_event_files``), and the
folders scripts write to by default (the job's TensorBoard folder, HF's ``output_dir/runs`` with
``output_dir=$GPUJOB_CKPT_DIR``, torch's ``runs/``, Lightning's ``lightning_logs/``) so that runs
written after the tunnel started show up too. TensorBoard reads each folder recursively; the run
names say where each run lies under the job (``ckpt/runs/Dec07_…``)."""

import os
from pathlib import Path
from typing import List, Optional, Tuple

from remote.core.layout import JobDir
from remote.metrics.metricsrc import WALK_DEPTH, find_event_files, tb_roots


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def served_folders(job: JobDir) -> Tuple[List[Path], List[Path]]:
    """(folders to serve, folders that hold this job's event files now): the job's TensorBoard folder
    first; a run found elsewhere is served through its parent (``results/runs`` for
    ``results/runs/<date>``), never through the job's or the code folder as a whole (a dataset
    there would be walked on every reload)."""
    spec = job.job_spec()
    roots = tb_roots(job, spec)
    since = float(job.record().submitted_at or 0)
    holding = sorted({Path(f).parent for f in find_event_files(roots, since)})
    broad = {job.path.resolve(), job.code.resolve(), (job.path / "ckpt").resolve()}
    serve = [roots[0][0], job.path / "ckpt" / "runs", job.code / "runs", job.code / "lightning_logs"]
    for folder in holding:
        if not any(_inside(folder, s) for s in serve):
            parent = folder.parent
            serve.append(parent if parent.resolve() not in broad and _inside(parent, job.path) else folder)
    kept = []  # type: List[Path]
    for s in serve:  # a folder inside another served one is read through that one
        if not any(_inside(s, k) for k in kept if k != s):
            kept = [k for k in kept if not _inside(k, s)] + [s]
    return kept, holding


def name_of(job: JobDir, folder: Path) -> str:
    """A served folder's run-group name: its place under the job (``tb``, ``ckpt/runs``); no ``:`` or ``,``
    (TensorBoard's ``--logdir_spec`` splits there)."""
    try:
        name = str(folder.relative_to(job.path))
    except ValueError:
        name = folder.name
    return name.replace(":", "_").replace(",", "_")


def arguments(job: JobDir) -> Tuple[List[str], List[str], Optional[str]]:
    """(TensorBoard's arguments naming what it serves, the served folders' names, a note saying where
    the search looked when no event file of the job is there yet). ``--logdir_spec`` for several
    folders: its text is what TensorBoard's ``/data/environment`` then answers as ``data_location``."""
    folders, holding = served_folders(job)
    names = [name_of(job, f) for f in folders]
    if any("," in str(f) for f in folders):  # a path TensorBoard's --logdir_spec cannot carry: the tb folder alone
        folders, names = folders[:1], names[:1]
    args = ["--logdir", str(folders[0])] if len(folders) == 1 else \
        ["--logdir_spec", ",".join("{}:{}".format(n, f) for n, f in zip(names, folders))]
    note = None if holding else "no event files of {} yet (looked in {}); TensorBoard shows runs as they are " \
        "written to the folders it reads".format(job.id, looked(job))
    return args, names, note


def looked(job: JobDir) -> str:
    """Where the search for event files goes (``tb, code (4 levels), ckpt/runs``)."""
    return ", ".join("{}{}".format(os.path.relpath(str(r), str(job.path)) if _inside(r, job.path) else r,
                                   " ({} levels)".format(d) if d == WALK_DEPTH else "")
                     for r, d in tb_roots(job, job.job_spec()))
