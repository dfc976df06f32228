"""``gpujob guard``: the opt-in automatic move (``retry.move_after``).

Only the laptop sees both hosts, so the laptop runs it: a loop (or one pass with ``--once``,
for cron) that asks each guarded job's host how the job is. A host that does not answer for
``retry.move_after`` gets its job moved (gpujob.usecases.relocate.move) to the next host of ``retry.move_to``
(default: the job's ``host:`` list, after the current one, wrapping round), with a ``lost``
notification on the job's channels saying where it went. When the time the host went away was
first seen is kept in ``guard.json`` beside the job index, so passes of ``--once`` add up.
A host the job left while it was silent is told (and the job stopped there if it runs: the
host was only cut off) when it answers again.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from gpujob.config import index
from gpujob.config.paths import atomicfile, state_dir
from gpujob.errors import GpujobError
from gpujob.jsontypes import JSONObject
from gpujob.transport.jobview import JobView
from gpujob.usecases.jobs.ops import FINAL

Note = Callable[[str], None]


def _away_since(job_id: str, now: float) -> float:
    """When a guard first found ``job_id``'s host away (``now`` if this is the first time), kept in
    ``guard.json`` under its lock: two guards at once keep each other's jobs."""
    def first(doc: JSONObject) -> bool:
        if isinstance(doc.get(job_id), (int, float)):
            return False  # seen away before: nothing to write
        doc[job_id] = now
        return True

    return float(atomicfile().update_json(state_dir() / "guard.json", first, 0o600)[job_id])


def _answered(job_id: str) -> None:
    """``job_id``'s host answered: its time away starts again next time."""
    atomicfile().update_json(state_dir() / "guard.json", lambda doc: doc.pop(job_id, None) is not None, 0o600)


def candidates(spec: Any, current: str) -> list[str]:
    """Where the job may go: ``retry.move_to`` else ``host:``, the hosts after ``current`` first."""
    hosts = list(spec.retry.move_to or spec.hosts)
    if current in hosts:
        i = hosts.index(current)
        hosts = hosts[i + 1:] + hosts[:i]
    return [h for h in hosts if h != current]


def _job_state(host: str, job_id: str) -> JSONObject | None:
    """The job's record as its host says, or None when the host does not answer."""
    from gpujob.config.hosts import HostStore
    from gpujob.transport.agent import connect_agent
    from gpujob.usecases.jobs import ops as jobs

    try:
        agent = connect_agent(HostStore().get(host))
        try:
            return jobs.status(agent, job_id)
        finally:
            agent.close()
    except GpujobError:
        return None


def _notify(spec: Any, job_id: str, old: str, res: JSONObject, why: str) -> list[JSONObject]:
    """The job's channels hear it from the laptop (its old host cannot speak)."""
    if not spec.notify:
        return []
    from gpujob.config.spec import notify_secrets
    from gpujob.usecases.notify.send import send_from_laptop
    from gpujob.usecases.secrets.job import collect_secrets, secret_refs

    ck = res.get("checkpoint") or ("the shared checkpoint" if res["source"] == "shared" else "scratch")
    event = {"event": "lost", "job_id": job_id, "name": spec.name, "host": old, "duration_s": None, "cost": None,
             "currency": None, "metrics": {},
             "reason": f"{why}; moved to {res['to']}, resumed from {ck}"}
    return send_from_laptop(notify_secrets(spec.notify)[0], event, collect_secrets(spec, secret_refs(spec)))


def _moved(spec: Any, job_id: str, old: str, res: JSONObject, why: str) -> JSONObject:
    """The job went on elsewhere: its time away starts again, its channels hear it."""
    _answered(job_id)
    sent = _notify(spec, job_id, old, res, why)
    return {"job_id": job_id, "action": "moved", "move": res, "notified": len(sent)}


def check(job_id: str, now: float, note: Note) -> JSONObject | None:
    """One look at one job: None while it needs watching, else what became of it."""
    from gpujob.config.spec import load_spec
    from gpujob.usecases.relocate.move import move, settle_old

    settle_old(job_id, note)  # a host it left earlier answers again: it must not run the job too
    entry = index.entry_of(job_id)
    if entry is None or not entry.get("job_file"):
        return {"job_id": job_id, "action": "skipped", "why": "not submitted from this machine (no job file recorded)"}
    spec = load_spec(entry["job_file"], entry.get("set") or [])
    if spec.retry.move_after is None:
        return {"job_id": job_id, "action": "skipped", "why": "retry.move_after is not set"}
    host = entry["host"]
    record = _job_state(host, entry["job_id"])
    if record is not None:
        view = JobView(record)
        state, reason = str(view.state), str(view.reason or "")
        _answered(entry["job_id"])
        if not (state == "stopped" and reason.startswith("gpu_error")):  # the agent stopped it to be moved
            return {"job_id": entry["job_id"], "action": "done", "state": state} if state in FINAL else None
        why = f"{host} stopped it for a GPU error ({reason[len('gpu_error: '):]})"
    else:
        away = now - _away_since(entry["job_id"], now)
        if away < spec.retry.move_after:
            note(f"{entry['job_id']}: {host} does not answer ({away:.0f} s of {spec.retry.move_after:.0f} s)")
            return None
        why = f"{host} did not answer for {away:.0f} s"
    for target in candidates(spec, host):
        note(f"{entry['job_id']}: {why}: moving it to {target}")
        try:
            res = move(entry["job_id"], target, note=note)
        except GpujobError as e:
            note(f"  {target}: {e}")
            continue
        return _moved(spec, entry["job_id"], host, res, why)
    from gpujob.usecases.pools.lost import pool_of, to_new_instance

    if pool_of(host):  # an instance of a pool: the job goes on on a new one of the same pool
        note(f"{entry['job_id']}: {why}: moving it to a new instance of pool {pool_of(host)}")
        try:
            res = to_new_instance(host, entry["job_id"], lambda target: move(entry["job_id"], target, note=note), note)
        except GpujobError as e:
            note(f"  {e}")
        else:
            return _moved(spec, entry["job_id"], host, res, why)
    note(f"{entry['job_id']}: no host to move it to took it; trying again later")
    return None


def guard(refs: list[str], interval: float = 30.0, once: bool = False, note: Note = lambda s: None) -> list[dict]:
    """Watch ``refs`` until each has finished or is not guardable (``once``: one pass); a
    moved job is watched on on its new host."""
    left = list(dict.fromkeys(refs))
    outcomes: list[dict] = []
    from gpujob.usecases.budget.account import guard_pass
    from gpujob.usecases.disks.warn import check as disks_check
    from gpujob.usecases.pools.release import release_due

    while left:
        for e in release_due(note):  # pool instances past their keep-warm, or half made (docs/pools.md)
            note(e)
        disks_check(note=note)  # powered-off hosts whose platform releases them soon (throttled; docs/power.md)
        guard_pass(note)  # the account's limits and balance (several jobs together can pass a limit)
        for ref in list(left):
            out = check(ref, time.time(), note)
            if out is not None:
                outcomes.append(out)
                if out["action"] != "moved":
                    left.remove(ref)
        if once or not left:
            break
        time.sleep(interval)
    return outcomes
