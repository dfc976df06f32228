"""Helper commands gpujob runs on the laptop besides the power commands (tests/gpujob/usecases/power/test_power_guards.py):
git, asked for the code a run ran at each submit. A clean filter that hangs (a git-lfs gone wrong) holds
the submit no longer than its limit and leaves no process behind; the run is recorded without a git
state rather than as a clean commit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import run_cli
from tests.helpers import wait_for


def test_a_git_filter_that_hangs_holds_no_submit_and_is_ended(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "main.py").write_text("print('hi')\n")
    (proj / "job.yaml").write_text(json.dumps({"name": "filtered", "run": "python main.py"}))
    (proj / ".gitattributes").write_text("*.py filter=hang\n")

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(proj), "-c", "user.email=t@t", "-c", "user.name=t", *args], check=True,
                       capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "first")
    pids = tmp_path / "filter.pids"
    git("config", "filter.hang.clean", f"sh -c 'echo $$ >> {pids}; exec sleep 3600'")
    (proj / "main.py").write_text("print('changed')\n")  # git diff runs the clean filter on it
    r = run_cli("submit", str(proj / "job.yaml"), "--host", "local", "--json", timeout=110,
                env_extra={"GPUJOB_GIT_TIMEOUT": "3"})
    assert r.returncode == 0, r.stderr
    assert "did not finish in 3 s and was ended with its processes" in r.stderr, r.stderr
    wait_for(pids.exists, 10, "the filter to have run")
    for pid in pids.read_text().split():  # the filter's process (its `sleep`): gone with the submit
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        assert state == "Z", f"the hung git filter (pid {pid}) still runs"
    run = json.loads(run_cli("runs", "--json").stdout)
    rows = run if isinstance(run, list) else run.get("runs", [])
    row = next(x for x in rows if x.get("job_id") == json.loads(r.stdout)["job_id"])
    assert not row.get("git_commit"), row  # not recorded as the clean commit it is not
