"""``gpujob rerun A [--set key=value]``: A's code and job again, with changes, linked to A.

The code is A's: the job file's folder when it still hashes the same, else A's kept snapshot
(``<state>/snapshots``), else A's git commit with its uncommitted diff applied, unpacked in the
cache folder (``restored_dir``: sent as the user's code) and hashed again: a tree that does not
hash as A's is refused, nothing submitted. The host checks the code it got hashes as what was
sent before the job is created (remote/data/codehash.py). A ``--set`` key that the job file has (``gpus``, ``retry.max_restarts``) overrides
it; any other key is a ``run:`` argument (``--set lr=1e-4`` → ``--lr 1e-4`` in the run line).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, TypedDict

from gpujob.config.ledger import open_ledger
from gpujob.config.ledger.code import code_hash, restore_snapshot, restored_dir, tree_files
from gpujob.config.ledger.params import set_arg, value_of
from gpujob.config.ledger.store import LedgerRow
from gpujob.config.spec import TOP_KEYS, load_spec
from gpujob.errors import GpujobError


def split_sets(run_line: str, sets: list[str]) -> tuple[str, list[str]]:
    """(the run line with the argument changes, the job-file overrides)."""
    overrides = []
    for item in sets:
        key, eq, val = item.partition("=")
        if not eq or not key.strip():
            raise GpujobError(f"--set {item!r}: expected KEY=VALUE", "e.g. --set lr=1e-4 or --set gpus=2")
        key = key.strip()
        if key.split(".")[0] in TOP_KEYS:
            overrides.append(item)
        else:
            run_line = set_arg(run_line, key, value_of(val) if val.lower() in ("true", "false") else val)
    return run_line, overrides


def _code_folder(row: LedgerRow, workdir: Path, exclude: list[str]) -> Path | None:
    """A folder holding the run's code, hashing exactly as it did: None when the job file's own folder
    still does; refused (nothing submitted) when it can be rebuilt from neither snapshot nor git."""
    want = row.get("code_hash")
    job = row["job_id"]
    if not want:
        raise GpujobError(f"the run ledger holds no record of the code {job} ran: a rerun could not be the same code",
                          "submit the job file again: gpujob submit " + (row.get("job_file") or "job.yaml"))
    if workdir.is_dir() and code_hash(workdir, tree_files(workdir, exclude)) == want:
        return None
    dest = restored_dir() / want
    done = dest.with_name(want + ".complete")  # beside, not inside: the tree must hash as it did
    if done.exists() and dest.is_dir() and code_hash(dest, tree_files(dest, exclude)) == want:
        return dest
    done.unlink(missing_ok=True)
    shutil.rmtree(dest, ignore_errors=True)
    why = None if restore_snapshot(want, dest) else _from_git(row, workdir, dest)
    if why is None:
        got = code_hash(dest, tree_files(dest, exclude))
        if got == want:
            done.write_text("")
            return dest
        why = f"the rebuilt tree hashes {got}, not {want} (its exclude: or ignore rules changed since?)"
    shutil.rmtree(dest, ignore_errors=True)
    raise GpujobError(f"the code of {job} cannot be rebuilt exactly: {why}; nothing was submitted",
                      "commit your code (reruns then rebuild it from the commit and its diff), or rerun "
                      "with the current code: gpujob submit " + (row.get("job_file") or "job.yaml"))


def _from_git(row: LedgerRow, workdir: Path, dest: Path) -> str | None:
    """Rebuild the run's code from its commit and kept diff into ``dest``; None, else why not."""
    commit = row.get("git_commit")
    if not commit:
        return "it changed since, was not in git and was too large to keep a copy of"
    with open_ledger() as lg:
        diff = lg.diff(digest) if (digest := row.get("diff_hash")) else None
    if row.get("diff_hash") and not diff:  # larger than DIFF_MAX (data left untracked): not kept
        return "its uncommitted change was too large to keep, and so was the tree"
    top = subprocess.run(["git", "-C", str(workdir), "rev-parse", "--show-toplevel", "--show-prefix"],
                         capture_output=True, text=True)
    if top.returncode != 0:
        return f"{workdir} is no longer in a git repository holding commit {commit[:12]}"
    root, prefix = (top.stdout.splitlines() + ["", ""])[:2]
    dest.mkdir(parents=True)
    arc = subprocess.run(f"git -C {_q(root)} archive {_q(commit)} {_q(prefix or '.')} | tar -x -C {_q(str(dest))}",
                         shell=True, capture_output=True, text=True)
    if arc.returncode != 0:
        return f"git could not give commit {commit[:12]} ({(arc.stderr.strip().splitlines() or ['?'])[-1]})"
    if prefix:  # the archive keeps the prefix; the job's folder is its top
        inner = dest / prefix
        tmp = dest.with_name(dest.name + ".inner")
        inner.rename(tmp)
        shutil.rmtree(dest)
        tmp.rename(dest)
    if diff:
        import os

        # outside any repository (a repository above the cache would take the paths as its own)
        env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(dest.parent))
        ap = subprocess.run(["git", "apply", "-p1", "-"], input=diff, cwd=dest, capture_output=True, text=True, env=env)
        if ap.returncode != 0:
            return f"its kept diff does not apply to commit {commit[:12]}"
    return None


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


class RerunPlan(TypedDict):
    """What ``rerun`` submits (``plan``)."""

    parent: str
    host: str | None
    job_file: str
    set: list[str]
    code_hash: str | None
    restored: bool
    expect_code: str


def plan(ref: str, sets: list[str]) -> RerunPlan:
    """What ``rerun`` submits: {parent, job_file, set} (the job file inside A's code folder when restored)."""
    with open_ledger() as lg:
        row = lg.find(ref)
    if row is None:
        raise GpujobError(f"no run {ref!r} in the ledger", "gpujob runs lists the runs this laptop knows")
    job_file = row.get("job_file")
    if not job_file or not Path(job_file).is_file():
        raise GpujobError(f"the job file of {row['job_id']} ({job_file or 'none recorded'}) is gone",
                          "put it back, or submit the job again with gpujob submit")
    before = list(row.get("overrides") or [])
    spec = load_spec(job_file, before)
    run_line, overrides = split_sets(row.get("run_line") or spec.run, sets)
    folder = _code_folder(row, Path(spec.workdir), spec.exclude)
    if folder is not None:
        _link_data(folder, spec)
    expect = _sent_hash(folder or Path(spec.workdir), spec)
    extra: list[str] = []
    if folder is not None:
        inside = _inside(Path(job_file), Path(spec.workdir))
        if inside is not None and (folder / inside).is_file():
            job_file = str(folder / inside)
        else:
            extra.append("workdir=" + json.dumps(str(folder)))
    if run_line != spec.run:
        extra.append("run=" + json.dumps(run_line))
    return {"parent": row["job_id"], "host": row.get("host"), "job_file": job_file,
            "set": before + overrides + extra, "code_hash": row.get("code_hash"), "restored": folder is not None,
            "expect_code": expect}


def _link_data(folder: Path, spec: Any) -> None:
    """A restored tree holds no ``data:`` source of the workdir (data is never code): each is linked
    at its path there to the file here, so the job file's ``data:`` still names it (and the code
    hash leaves it out, as ``exclude:`` does)."""
    srcs = {d.dst: d.src for d in spec.data}
    for rel, dst in spec.data_in_code.items():
        place = folder / rel
        if dst in srcs and not place.is_symlink() and not place.exists():
            place.parent.mkdir(parents=True, exist_ok=True)
            place.symlink_to(srcs[dst])


def _sent_hash(folder: Path, spec: Any) -> str:
    """The hash the host's copy of ``folder`` must have: its files a sync sends (never_sent's left out)."""
    from gpujob.usecases.secrets.never_sent import declared_values, sendable

    return code_hash(folder, sendable(folder, tree_files(folder, spec.exclude), declared_values(spec)))


def _inside(path: Path, folder: Path) -> Path | None:
    try:
        return path.resolve().relative_to(folder.resolve())
    except ValueError:
        return None
