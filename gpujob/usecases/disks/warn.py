"""The warnings 3 days and 1 day before a platform releases a powered-off host: each once per
powered-off period, sent from the laptop to the notify channels of the host's jobs, naming the
checkpoints that exist only there and the commands that save them.

The check asks no host: it reads the profiles, the job index and the run ledger. It runs where the
laptop already looks (``gpujob guard``'s loop, the dashboard, ``ls`` and ``host ls``), at most every
``GPUJOB_DISKS_CHECK_EVERY`` seconds (600) over all of them: the time of the last check and the
warnings sent are kept in ``disks.json`` in the state folder."""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any, Callable, TypedDict

from gpujob.config import index
from gpujob.config.hosts import Host, HostStore
from gpujob.config.paths import atomicfile, state_dir
from gpujob.errors import GpujobError
from gpujob.jsontypes import JSON, JSONObject
from gpujob.usecases.disks.countdown import DAY, Release, release_of
from gpujob.usecases.disks.onlythere import Held, describe, held, jobs_on, ledger_rows, only_there

Note = Callable[[str], None]
WARN_DAYS = (3, 1)  # each warning once per powered-off period
EVENT = "disk_release"
OTHER_JOBS = 5  # job files read for channels when the host's own jobs name none


class Warned(TypedDict):
    """One warning as the check handled it."""

    host: str
    days: int
    left: str
    only_there: list[str]
    channels: int
    delivered: int


def _every() -> float:
    try:
        return max(0.0, float(os.environ.get("GPUJOB_DISKS_CHECK_EVERY", "600")))
    except ValueError:
        return 600.0


def _path() -> Any:
    return state_dir() / "disks.json"


def due(rel: Release, sent: list[int]) -> int | None:
    """The warning due now (3 or 1 days before), if not sent in this powered-off period; a release
    past by more than a day warns no more (the instance is gone: ``host ls`` says ``due``)."""
    left = rel.get("left_s", 0.0)
    if left < -DAY:
        return None
    for days in sorted(WARN_DAYS):
        if left <= days * DAY:
            return None if days in sent else days
    return None


def countdowns(now: float | None = None, holdings: bool = False) -> dict[str, Release]:
    """Every powered-off host's countdown (its profile alone); ``holdings``: with its jobs whose newest
    checkpoint is there alone (the job index and the ledger)."""
    out = {h.name: rel for h in HostStore().all() if (rel := release_of(h, now)) is not None}
    for name, rel in out.items():
        if holdings and "error" not in rel:
            rel["only_there"] = only_there(held(name))
    return out


def _claim(now: float, force: bool) -> dict[str, Any] | None:
    """The state, with this check's time written in it; None when another check ran within the interval."""
    path = _path()
    if not force:
        try:
            import json

            last = json.loads(path.read_text()).get("checked_at")
            if isinstance(last, (int, float)) and now - last < _every():
                return None  # read without the lock: most looks end here
        except (OSError, ValueError, AttributeError):
            pass
    won = []

    def edit(doc: dict[str, Any]) -> bool:
        last = doc.get("checked_at")
        if not force and isinstance(last, (int, float)) and now - last < _every():
            return False  # another process claimed it meanwhile
        doc["checked_at"] = now
        won.append(True)
        return True

    doc = atomicfile().update_json(path, edit, 0o600)
    return doc if won else None


def _mark(host: str, off_since: float, days: int, gone: list[str]) -> None:
    """``days``' warning (and the earlier ones) sent for ``host`` in the period off since ``off_since``;
    hosts no longer powered off (``gone``) forgotten."""
    def edit(doc: dict[str, Any]) -> None:
        hosts = doc.setdefault("hosts", {})
        for name in gone:
            hosts.pop(name, None)
        entry = hosts.get(host) if isinstance(hosts.get(host), dict) else None
        sent = entry.get("sent", []) if entry and entry.get("off_since") == off_since else []
        hosts[host] = {"off_since": off_since, "sent": sorted({*sent, *(d for d in WARN_DAYS if d >= days)})}

    atomicfile().update_json(_path(), edit, 0o600)


def _sent(doc: dict[str, Any], host: str, off_since: float) -> list[int]:
    entry = (doc.get("hosts") or {}).get(host)
    if isinstance(entry, dict) and entry.get("off_since") == off_since and isinstance(entry.get("sent"), list):
        return [d for d in entry["sent"] if isinstance(d, int)]
    return []


def check(now: float | None = None, note: Note | None = None, quick: bool = False, force: bool = False) -> list[Warned]:
    """Send the warnings due (throttled: see the module); ``quick``: one try of 5 s per channel (``ls``).
    Never raises for what it finds: a host it cannot warn about is said through ``note``."""
    now = time.time() if now is None else now
    say = note or (lambda s: None)
    try:
        counts = countdowns(now)
    except GpujobError:  # hosts.yaml unreadable: the command itself says so
        return []
    if not any("error" not in r for r in counts.values()):
        return []
    doc = _claim(now, force)
    if doc is None:
        return []
    gone = [h for h in doc.get("hosts") or {} if h not in counts]
    out: list[Warned] = []
    store = HostStore()
    for name, rel in counts.items():
        if "error" in rel:
            say(f"gpujob: {rel['error']}")
            continue
        days = due(rel, _sent(doc, name, rel["powered_off_at"]))
        if days is None:
            continue
        try:
            warned = warn(store.get(name, checked=False), rel, days, quick)
        except (GpujobError, OSError, sqlite3.Error) as e:
            say(f"gpujob: the {days}-day warning about {name}'s disk was not sent: {e}")
            continue
        say(_said(warned, rel))
        if warned["delivered"] or not warned["channels"]:  # no channel: said here, the only place it can be
            _mark(name, rel["powered_off_at"], days, gone)
        out.append(warned)
    return out


def _said(w: Warned, rel: Release) -> str:
    at = time.strftime("%Y-%m-%d %H:%M", time.localtime(rel["released_at"]))
    only = "; ".join(w["only_there"]) or "no checkpoint only there"
    sent = (f"sent to {w['delivered']} of {w['channels']} channel(s)" if w["channels"]
            else f"no notify channel of its jobs' files takes {EVENT}: said here only")
    when = f"in {w['left']} ({at})" if rel["left_s"] > 0 else f"at {at} (it may be gone already)"
    return (f"gpujob: {w['host']} has been powered off since "
            f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(rel['powered_off_at']))}: its platform releases it and "
            f"wipes its disk {when}; only there: {only} ({sent})")


def warn(host: Host, rel: Release, days: int, quick: bool = False) -> Warned:
    """Send ``days``' warning about ``host`` to its jobs' channels; what was sent and where it arrived."""
    from gpujob.usecases.notify.send import notify, send_from_laptop
    from gpujob.usecases.secrets.file import secrets_from_env

    jobs = held(host.name)
    event = disk_event(host, rel, days, jobs)
    cfg = channels_for(host.name)
    delivered = 0
    if cfg["channels"]:
        outcomes = send_from_laptop(cfg, event, secrets_from_env(notify.secret_names(cfg)),
                                    retries=0 if quick else 2, timeout=5.0 if quick else 10.0)
        delivered = sum(1 for o in outcomes if o.get("ok"))
    return {"host": host.name, "days": days, "left": str(rel["left"]),
            "only_there": [describe(j) for j in only_there(jobs)], "channels": len(cfg["channels"]),
            "delivered": delivered}


def save_commands(host: Host, jobs: list[Held]) -> list[str]:
    """The commands that bring each such job's newest checkpoint to the laptop."""
    on = (f"gpujob host on {host.name}" if (host.power or {}).get("on")
          else f"power {host.name} on in its provider's console")
    return [on] + [f"gpujob pull {j['job_id']} --latest" for j in jobs]


def disk_event(host: Host, rel: Release, days: int, jobs: list[Held]) -> JSONObject:
    """The ``disk_release`` event: the webhook's JSON, and the title and text every channel renders."""
    risky = only_there(jobs)
    off = time.strftime("%Y-%m-%d %H:%M", time.localtime(rel["powered_off_at"]))
    at = time.strftime("%Y-%m-%d %H:%M", time.localtime(rel["released_at"]))
    after = rel["after_s"] / DAY
    commands = save_commands(host, risky)
    remedy = (f"{commands[0]}, then {'; '.join(commands[1:])} (a power-on also restarts the platform's count); "
              "a checkpoint.mirror keeps the next runs' checkpoints off the instance (docs/checkpoints.md)"
              if risky else f"nothing of gpujob's is only there; {commands[0]} restarts the platform's count")
    return {
        "event": EVENT, "job_id": "", "name": "", "host": host.name, "duration_s": None, "cost": None,
        "currency": None, "metrics": {}, "days": days, "left": rel["left"], "left_s": rel["left_s"],
        "powered_off_at": rel["powered_off_at"], "released_at": rel["released_at"],
        "reason": (f"powered off since {off}; its platform releases an instance powered off for {after:g} days and "
                   "wipes its disk: " + (f"in {rel['left']} ({at})" if rel["left_s"] > 0
                                          else f"due at {at}: it may be gone already")),
        "only_there": listed([describe(j) for j in risky]),
        "checkpoints": [{k: v for k, v in j.items() if isinstance(v, (str, int, type(None)))} for j in jobs],
        "commands": listed(commands if risky else commands[:1]),
        "remedy": remedy,
    }


def listed(items: list[str]) -> list[JSON]:
    return list(items)


def channels_for(host: str) -> dict[str, list[JSONObject]]:
    """The notify channels of ``host``'s jobs that want ``disk_release`` (each once), read from their job
    files (else the spec the ledger kept); when those name none, the newest other jobs' ones."""
    from gpujob.usecases.notify.send import notify

    mine = list(reversed(jobs_on(host)))
    others = [j for j in dict.fromkeys(e.get("job_id", "") for e in reversed(index.entries())) if j and j not in mine]
    found: dict[str, JSONObject] = {}
    for group in (mine, others[:OTHER_JOBS]):
        for job_id in group:
            cfg = _notify_of(job_id)
            chans = [c for c in (cfg or {}).get("channels") or [] if isinstance(c, dict)]
            for ch in chans:
                if notify.wants(cfg, EVENT, ch):
                    import json

                    key = json.dumps({k: v for k, v in ch.items() if k not in ("on", "name")}, sort_keys=True, default=str)
                    found.setdefault(key, {**ch, "on": [EVENT]})
        if found:
            break
    return {"channels": list(found.values())}


def _notify_of(job_id: str) -> dict[str, Any] | None:
    """The job's ``notify:`` section: its job file's as it reads now, else the spec the ledger kept."""
    from gpujob.config.remembered import entry_of

    try:
        entry = entry_of(job_id)
    except GpujobError:
        entry = None
    if entry and entry.get("job_file"):
        from gpujob.config.spec import load_spec

        try:
            return load_spec(entry["job_file"], entry.get("set") or []).notify or None
        except (GpujobError, OSError):
            pass
    spec = (ledger_rows([job_id]).get(job_id) or {}).get("spec") or {}
    got = spec.get("notify")
    return got if isinstance(got, dict) else None
