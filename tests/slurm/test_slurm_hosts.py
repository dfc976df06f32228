"""A Slurm host's profile (``host add/set --slurm --partition ...``): what cannot hold is refused before
anything is saved, and turning Slurm off takes its settings with it."""

from __future__ import annotations

from gpujob.config.hosts import HostStore
from tests.conftest import run_cli

LINE = "ssh -p 2222 root@login.cluster.example"


def test_a_refused_slurm_profile_saves_nothing_and_a_good_one_round_trips() -> None:
    for args, said in ((["--partition", "gpu"], "not a Slurm host"),
                       (["--slurm", "--idle-shutdown", "30m"], "never powers it")):
        r = run_cli("host", "add", "hpc", "--ssh", LINE, "--no-check", *args)
        assert r.returncode != 0 and said in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert "hpc" not in {h.name for h in HostStore().all()}  # a corrected retry needs no --force
    r = run_cli("host", "add", "hpc", "--ssh", LINE, "--no-check", "--slurm", "--partition", "gpu", "--qos", "normal")
    assert r.returncode == 0, r.stderr
    h = HostStore().get("hpc", checked=False)
    assert (h.slurm, h.partition, h.qos, h.shutdown_command) == (True, "gpu", "normal", None)
    assert h.scheduler_doc() == {"kind": "slurm", "partition": "gpu", "qos": "normal"}
    r = run_cli("host", "set", "hpc", "--slurm", "false", "--no-check")
    assert r.returncode == 0, r.stderr
    h = HostStore().get("hpc", checked=False)
    assert (h.slurm, h.partition, h.qos) == (False, None, None) and h.scheduler_doc() is None
