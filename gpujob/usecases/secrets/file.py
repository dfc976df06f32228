"""The secrets file: ``NAME=value`` lines in ``secrets.env`` beside the config, read by every submit,
sync, notification and ``power:`` command that names a secret; the environment wins over it."""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Iterable
from pathlib import Path

from gpujob.config.paths import config_dir

SECRETS_FILE_NAME = "secrets.env"


class InsecureSecretsFileWarning(UserWarning):
    """The secrets file can be read by the group or by others."""


def default_secrets_file() -> Path:
    """``secrets.env`` in the config folder (``$GPUJOB_CONFIG_DIR``, else ``~/.config/gpujob``)."""
    return config_dir() / SECRETS_FILE_NAME


def parse_dotenv(text: str) -> dict[str, str]:
    """``NAME=value`` lines (``export`` prefix, quotes, ``#`` comments and blank lines allowed)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            q, value = value[0], value[1:-1]
            if q == '"':
                value = value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
        else:
            hash_at = value.find(" #")
            if hash_at >= 0:
                value = value[:hash_at].rstrip()
        out[name] = value
    return out


def read_secrets_file(path: Path) -> dict[str, str]:
    """All entries of a dotenv-style secrets file; warns when group or others may read it."""
    st = path.stat()
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        warnings.warn(
            f"{path} is readable by group or others (mode {stat.S_IMODE(st.st_mode):o}); run: chmod 600 {path}",
            InsecureSecretsFileWarning,
            stacklevel=3,
        )
    return parse_dotenv(path.read_text(encoding="utf-8"))


def secrets_from_env(names: Iterable[str] | None, secrets_file: str | Path | None = None) -> dict[str, str]:
    """The values of ``names`` (all of the file's entries when None) from the environment, else the
    secrets file (``secrets_file`` or :func:`default_secrets_file` when it exists). Names found in
    neither are left out: ``notify.validate_channels(cfg, secrets)`` reports them."""
    path = Path(secrets_file).expanduser() if secrets_file else default_secrets_file()
    from_file: dict[str, str] = {}
    if path.is_file():
        from_file = read_secrets_file(path)
    elif secrets_file:
        raise FileNotFoundError(f"secrets file {path} does not exist")
    wanted = list(from_file) if names is None else list(dict.fromkeys(names))
    out: dict[str, str] = {}
    for n in wanted:
        if os.environ.get(n):
            out[n] = os.environ[n]
        elif n in from_file:
            out[n] = from_file[n]
    return out


def blank(text: str, secrets: dict[str, str]) -> str:
    """``text`` with the secrets' values as ``***`` (a helper command's output before it is shown)."""
    for v in secrets.values():
        if len(v) >= 4:
            text = text.replace(v, "***")
    return text


def secrets_env() -> dict[str, str]:
    """The secrets file's entries: what a provider's command (power, pools) gets in its environment."""
    path = default_secrets_file()
    return read_secrets_file(path) if path.is_file() else {}
