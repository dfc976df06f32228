"""Fixtures of a real Slurm cluster (tests/slurm/cluster.py) and its login node (a real sshd whose
sessions reach the cluster: ``SLURM_CONF`` set for them, as a cluster's /etc/slurm would)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import start_sshd, stop_sshd
from tests.slurm.cluster import Cluster, SlurmLogin, start_cluster, stop_cluster

HOST = "cluster"  # the host profile slurm_login saves


def _cluster(request: pytest.FixtureRequest, tmp_path: Path, nodes: int) -> Iterator[Cluster]:
    """``request.param``: start_cluster's options (kill_wait, max_time, partitions, cpus)."""
    c = start_cluster(nodes, **getattr(request, "param", {}))
    try:
        yield c
    finally:
        stop_cluster(c, keep_logs=tmp_path / "slurm-logs")  # its folder goes; the logs stay with the test's


@pytest.fixture
def slurm_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A one-node cluster (n1, 2 CPUs, partition debug); ``parametrize("slurm_cluster",
    [{"kill_wait": 2, "max_time": "1:00", "partitions": ["PartitionName=small Nodes=n1 MaxNodes=1"]}],
    indirect=True)`` passes options."""
    yield from _cluster(request, tmp_path, 1)


@pytest.fixture
def slurm_cluster2(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A two-node cluster (n1, n2, 2 CPUs each, partition debug); options as for ``slurm_cluster``."""
    yield from _cluster(request, tmp_path, 2)


def _login(c: Cluster, tmp_path: Path) -> Iterator[SlurmLogin]:
    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.keys import public_key_line

    sshd = start_sshd(tmp_path / "login-sshd", set_env={"SLURM_CONF": str(c.conf)})
    try:
        sshd.authorize(public_key_line())
        user = os.environ.get("USER", "root")
        shared = tmp_path / "shared"
        shared.mkdir(exist_ok=True)
        HostStore().save(Host(name=HOST, hostname="127.0.0.1", port=sshd.port, user=user, root=str(shared),
                              env={"GPUJOB_PATH_PREFIX": str(Path(sys.executable).parent)}, connect_timeout=5,
                              scheduler="slurm", partition="debug"))
        yield SlurmLogin(c, sshd, HOST, shared, user)
    finally:
        stop_sshd(sshd)


@pytest.fixture
def slurm_login(slurm_cluster: Cluster, tmp_path: Path) -> Iterator[SlurmLogin]:
    """The one-node cluster's login node and the host profile ``cluster`` reaching it."""
    yield from _login(slurm_cluster, tmp_path)


@pytest.fixture
def slurm_login2(slurm_cluster2: Cluster, tmp_path: Path) -> Iterator[SlurmLogin]:
    """The two-node cluster's login node and the host profile ``cluster`` reaching it."""
    yield from _login(slurm_cluster2, tmp_path)
