"""The secrets a job names: their values for a submit (``secrets:`` and ``${NAME}`` under ``notify:``),
and its job file kept home when it holds literal keys."""

from __future__ import annotations

from typing import Any

from gpujob.config.spec import JobSpec
from gpujob.errors import SpecError
from gpujob.usecases.secrets.file import secrets_from_env


def collect_secrets(spec: JobSpec, extra_names: list[str] | None = None) -> dict[str, str]:
    """Values of the job's ``secrets:`` (and ``${NAME}`` references) from the laptop's environment."""
    names = list(dict.fromkeys(spec.secrets + (extra_names or [])))
    values = secrets_from_env(names)
    missing = [n for n in names if n not in values]
    if missing:
        raise SpecError(
            f"secret(s) {', '.join(missing)} not set on this machine",
            "export them in your shell (or put NAME=value lines in the gpujob secrets file); nothing was sent",
        )
    from gpujob.config.spec import notify_secrets

    values.update(notify_secrets(spec.notify)[1])  # literal keys written in notify: travel here, not in spec.json
    return values


def keep_secret_job_file_home(spec: JobSpec) -> None:
    """A job file with literal secrets in ``notify:`` is not uploaded (its values go in the secrets file)."""
    from pathlib import Path

    from gpujob.config.spec import notify_secrets

    if not notify_secrets(spec.notify)[1]:
        return
    try:
        rel = Path(spec.source).resolve().relative_to(Path(spec.workdir))
    except ValueError:
        return
    if "/" + rel.as_posix() not in spec.exclude:  # the run ledger's record asks first (usecases/experiments)
        spec.exclude.append("/" + rel.as_posix())


def secret_refs(spec: JobSpec) -> list[str]:
    """Names written as ``${NAME}`` anywhere in ``notify:`` (channel URLs, tokens, passwords)."""
    import re

    found: list[str] = []

    def visit(v: Any) -> None:
        if isinstance(v, str):
            found.extend(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", v))
        elif isinstance(v, dict):
            for x in v.values():
                visit(x)
        elif isinstance(v, list):
            for x in v:
                visit(x)

    visit(spec.notify)
    return found
