"""A node's part of a job over several nodes (the submit request's ``node``), shared by nodes.py and submit.py."""

from __future__ import annotations

from typing import TypedDict


class NodeInfo(TypedDict):
    """One node's part of a job over several (the submit request's ``node``: torchrun's rendezvous)."""

    rank: int
    num_nodes: int
    addrs: list[str]
    master_addr: str
    port: int
    rdzv_id: str  # the job id
    hosts: list[str]
