"""``submit``: validate, sync, start the job under the agent. The laptop may sleep after it."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any, Callable

from gpujob.config.hosts import Host
from gpujob.config.spec import JobSpec
from gpujob.errors import GpujobError, Interrupted
from gpujob.transport.agent import Agent
from gpujob.usecases.launch.nodeinfo import NodeInfo
from gpujob.usecases.secrets.job import collect_secrets, keep_secret_job_file_home, secret_refs
from gpujob.usecases.sync.upload import sync_job


def submit(
    agent: Agent, spec: JobSpec, host: Host, progress: Callable[[int, int], None] | None = None, *,
    job_id: str | None = None, node: NodeInfo | None = None,
    call: Callable[[dict[str, Any]], dict[str, Any]] | None = None, force: bool = False,
    expect_code: str | None = None,
) -> dict[str, Any]:
    """Sync the code and data, then create and start the job. Returns the agent's answer.

    ``job_id`` and ``node`` are given for a job over several nodes (see gpujob.usecases.launch.nodes);
    ``call`` sends the request another way (gpujob.usecases.relocate.move: with the job's files);
    ``force`` sends a home-folder or huge workdir (usecases/secrets/workdir.py); ``expect_code``: the
    hash the host's copy of the code must have (``rerun``: the run it repeats), else no job.
    """
    from gpujob.usecases.launch.runcheck import check_script

    check_script(spec.run, spec.workdir, spec.source)  # before a byte is sent
    if call is None:  # a new job (a move's job was counted when it was submitted)
        from gpujob.usecases.budget.gate import admit

        spec = admit(spec, host)  # the account's limits: refused with the figures, or capped
    if spec.node_count > 1 and not host.slurm:
        raise GpujobError(f"nodes: {spec.node_count} asks for nodes of a Slurm cluster, and {host.name} is not a "
                          "Slurm host: nothing was sent",
                          "list the hosts instead (nodes: [a, b]), or submit to a Slurm host "
                          "(gpujob host add NAME --ssh LOGIN --slurm)")
    secrets = collect_secrets(spec, secret_refs(spec))
    keep_secret_job_file_home(spec)
    import secrets as _secrets

    lease = _secrets.token_hex(8)  # the project's code is this submit's from its manifest to its snapshot
    from gpujob.usecases.launch.early import EarlySubmit

    early = EarlySubmit(agent) if call is None else None  # the submit command starts while the upload runs
    try:
        report = sync_job(agent, spec, spec.name, progress, lease=lease, force=force,
                          on_stream=early.start if early else None)
    except KeyboardInterrupt:
        if early:
            early.cancel()
        raise Interrupted(f"interrupted during the upload to {host.name}: nothing was submitted",
                          "what arrived is kept: the next gpujob submit resumes the upload") from None
    except BaseException:
        if early:
            early.cancel()
        raise
    request = {
        "spec": spec.to_remote(),
        "project": spec.name,
        "host": host.name,
        "host_env": {**host.env, **({"GPUJOB_PATH_PREFIX": os.environ.get("PATH", "")} if host.kind == "local" else {})},
        "price_per_hour": host.price_per_hour,
        "currency": host.currency,
        "shutdown_command": None if host.slurm else host.shutdown_command,  # a compute node is never powered off
        "scheduler": host.scheduler_doc(),
        "secrets": secrets,
        "job_id": job_id,
        "node": node,
        "lease": lease,
    }
    if expect_code:
        request["expect_code_hash"] = expect_code
    import json

    try:
        if call:
            res = call(request)
        else:
            data = json.dumps(request).encode()
            res = (early.call(data) if early else None) or agent.call("submit", input=data)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted while {host.name} was creating the job: it may have been submitted",
                          f"gpujob ls --host {host.name} shows whether it was") from None
    res["host"] = host.name
    res["sync"] = asdict(report)
    return res
