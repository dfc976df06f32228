"""A per-job cgroup (v2) where the host lets us create one: no process of the job can leave it
(a double fork, ``setsid``, an emptied environment all stay inside), and ``cgroup.kill`` ends
them all at once. Containers usually mount cgroupfs read-only: then ``create`` says why not and
the other ways of finding the job's processes (remote/stopping/find.py) carry the stop alone.
"""

import hashlib
import os
from pathlib import Path
from typing import Optional, Set, Tuple


def _mount() -> Optional[str]:
    """Where cgroup2 is mounted (``/sys/fs/cgroup``, or ``/sys/fs/cgroup/unified`` on a hybrid host)."""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    return left.split()[4]
    except OSError:
        pass
    return None


def _own() -> str:
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return "/"


def name_for(job_dir: str) -> str:
    """One cgroup per job folder (two test roots or two nodes may share a job id)."""
    return "gpujob-{}-{}".format(os.path.basename(job_dir)[:60], hashlib.sha1(job_dir.encode()).hexdigest()[:8])


def path_for(job_dir: str) -> Optional[str]:
    mount = _mount()
    return os.path.join(mount + _own().rstrip("/"), name_for(job_dir)) if mount else None


def remove_for(job_dir: str) -> None:
    """Remove the job's cgroup if it is there and empty (``rm``, a test's cleanup)."""
    remove(path_for(job_dir))


def create(job_dir: str) -> Tuple[Optional[str], str]:
    """(the cgroup's folder, "") or (None, why the host does not allow one)."""
    if os.environ.get("GPUJOB_NO_CGROUP"):
        return None, "GPUJOB_NO_CGROUP is set"
    path = path_for(job_dir)
    if not path:
        return None, "no cgroup2 file system is mounted"
    mount = os.path.dirname(path)
    try:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "cgroup.procs")):
            pass
    except OSError as e:
        return None, "cannot create a cgroup under {}: {}".format(mount, e.strerror or e)
    return path, ""


def pids(path: Optional[str]) -> Set[int]:
    if not path:
        return set()
    try:
        return {int(x) for x in Path(path, "cgroup.procs").read_text().split()}
    except (OSError, ValueError):
        return set()


def kill(path: Optional[str]) -> bool:
    """SIGKILL every process in the cgroup (``cgroup.kill``, Linux 5.14+); False where unsupported."""
    if not path:
        return False
    try:
        Path(path, "cgroup.kill").write_text("1")
        return True
    except OSError:
        return False


def remove(path: Optional[str]) -> None:
    """Remove the cgroup once empty (a live one stays: its processes are still the job's)."""
    if path:
        try:
            os.rmdir(path)
        except OSError:
            pass


def enter_line(path: Optional[str]) -> str:
    """Shell words that put the run command's shell into the cgroup before it starts anything."""
    if not path:
        return ""
    import shlex

    # braces: a redirection that fails (a cgroup we may make but not enter) says nothing either
    return "{{ echo $$ > {}; }} 2>/dev/null || true\n".format(shlex.quote(os.path.join(path, "cgroup.procs")))
