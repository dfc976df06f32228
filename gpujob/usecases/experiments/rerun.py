"""``gpujob rerun A [--set key=value]``: A's code and job again, with changes, linked to A.

The code is A's: the job file's folder when it still hashes the same, else A's kept snapshot
(``<state>/snapshots``), else A's git commit with its uncommitted diff applied, unpacked in the
cache folder. A ``--set`` key that the job file has (``gpus``, ``retry.max_restarts``) overrides
it; any other key is a ``run:`` argument (``--set lr=1e-4`` → ``--lr 1e-4`` in the run line).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from gpujob.config.ledger import open_ledger
from gpujob.config.ledger.code import code_hash, restore_snapshot, tree_files
from gpujob.config.ledger.params import set_arg, value_of
from gpujob.config.paths import cache_dir
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


def _code_folder(row: dict[str, Any], workdir: Path, exclude: list[str]) -> Path | None:
    """A folder holding the run's code: None when the job file's own folder still does."""
    want = row.get("code_hash")
    if not want:
        return None
    if workdir.is_dir() and code_hash(workdir, tree_files(workdir, exclude)) == want:
        return None
    dest = cache_dir() / "rerun" / want
    done = dest.with_name(want + ".complete")  # beside, not inside: the tree must hash as it did
    if done.exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    if restore_snapshot(want, dest) or _from_git(row, workdir, dest):
        done.write_text("")
        return dest
    raise GpujobError(f"the code of {row['job_id']} has changed since and was neither kept nor in git",
                      "commit your code (reruns then rebuild it from the commit and its diff), or rerun "
                      "with the current code: gpujob submit " + (row.get("job_file") or "job.yaml"))


def _from_git(row: dict[str, Any], workdir: Path, dest: Path) -> bool:
    commit = row.get("git_commit")
    if not commit:
        return False
    top = subprocess.run(["git", "-C", str(workdir), "rev-parse", "--show-toplevel", "--show-prefix"],
                         capture_output=True, text=True)
    if top.returncode != 0:
        return False
    root, prefix = (top.stdout.splitlines() + ["", ""])[:2]
    dest.mkdir(parents=True)
    arc = subprocess.run(f"git -C {_q(root)} archive {_q(commit)} {_q(prefix or '.')} | tar -x -C {_q(str(dest))}",
                         shell=True, capture_output=True, text=True)
    if arc.returncode != 0:
        return False
    if prefix:  # the archive keeps the prefix; the job's folder is its top
        inner = dest / prefix
        tmp = dest.with_name(dest.name + ".inner")
        inner.rename(tmp)
        shutil.rmtree(dest)
        tmp.rename(dest)
    with open_ledger() as lg:
        diff = lg.diff(row["diff_hash"]) if row.get("diff_hash") else None
    if diff:
        import os

        # outside any repository (a repository above the cache would take the paths as its own)
        env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(dest.parent))
        ap = subprocess.run(["git", "apply", "-p1", "-"], input=diff, cwd=dest, capture_output=True, text=True, env=env)
        if ap.returncode != 0:
            return False
    return True


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


def plan(ref: str, sets: list[str]) -> dict[str, Any]:
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
            "set": before + overrides + extra, "code_hash": row.get("code_hash"), "restored": folder is not None}


def _inside(path: Path, folder: Path) -> Path | None:
    try:
        return path.resolve().relative_to(folder.resolve())
    except ValueError:
        return None
