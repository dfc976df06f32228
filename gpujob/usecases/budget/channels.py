"""Who hears about the account: the ``notify:`` channels of the file ``gpujob budget set --notify FILE``
names (a job file, or a file with only ``notify:``), else those of the jobs a limit stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpujob.bundle import import_remote
from gpujob.config.budget import Budget
from gpujob.errors import SpecError
from gpujob.jsontypes import JSONObject

notify = import_remote("notify")


def notify_section(path: str) -> dict[str, Any]:
    """The checked ``notify:`` of ``path``; ``SpecError`` naming the file when it has none or a wrong one."""
    from gpujob.config.yamlsafe import load_yaml, read_job_file

    doc, _ = load_yaml(read_job_file(Path(path)), path)
    cfg = doc.get("notify") if isinstance(doc, dict) else None
    if isinstance(cfg, list):  # a bare list of channels means the channels
        cfg = {"channels": cfg}
    if not isinstance(cfg, dict) or not cfg.get("channels"):
        raise SpecError(f"{path} has no notify: channels", "add notify: {channels: [...]} (docs/notifications.md)")
    errs = notify.validate_channels(cfg)  # without secrets: the shape only (a ${NAME} is looked up at send)
    if errs:
        raise SpecError(f"{path}: notify: {errs[0]}", "fix the channel (docs/notifications.md)")
    return cfg


def _of_jobs(job_ids: list[str]) -> dict[str, Any] | None:
    from gpujob.config import index
    from gpujob.config.spec import load_spec

    for job_id in job_ids:
        entry = index.entry_of(job_id)
        if entry and entry.get("job_file"):
            try:
                spec = load_spec(entry["job_file"], entry.get("set") or [])
            except SpecError:
                continue
            if (spec.notify or {}).get("channels"):
                return spec.notify
    return None


def send(budget: Budget, event: JSONObject, job_ids: list[str] | None = None) -> list[JSONObject]:
    """Send ``event`` to the account's channels (every channel: an account event is no job's ``on:``)."""
    from gpujob.config.spec import notify_secrets
    from gpujob.usecases.notify.send import send_from_laptop
    from gpujob.usecases.secrets.file import secrets_from_env

    try:
        cfg = notify_section(budget.notify_file) if budget.notify_file else _of_jobs(job_ids or [])
    except SpecError:
        cfg = _of_jobs(job_ids or [])
    if not cfg:
        return []
    plain, literal = notify_secrets(cfg)
    secrets = {**secrets_from_env(notify.secret_names(plain)), **literal}
    return send_from_laptop(plain, event, secrets, all_channels=True)
