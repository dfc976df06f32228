"""gpujob's own SSH files on the laptop: its client keys (made on first use) and known_hosts.

Each profile added with the instance's password gets a key of its own (``keys/<name>_ed25519``),
so that one instance's ``authorized_keys`` unlocks no other: a provider, or whoever has the
instance next, learns nothing that opens the user's other instances (docs/security.md). The
shared key (``id_ed25519``) stays for profiles whose instance already accepted it.
The transport reads them only by the paths an ``Endpoint`` names (``Host.endpoint()``)."""

from __future__ import annotations

from pathlib import Path

from gpujob.config.paths import config_dir, write_private


def known_hosts_path() -> Path:
    return config_dir() / "known_hosts"


def key_path() -> Path:
    """The shared key: profiles whose instance accepted it before per-profile keys, and ``--no-check``."""
    return config_dir() / "id_ed25519"


def host_key_path(name: str) -> Path:
    """The key of profile ``name`` (it may not exist: the profile then uses the shared key)."""
    return config_dir() / "keys" / f"{name}_ed25519"


def pub_path(path: Path) -> Path:
    return path.with_name(path.name + ".pub")  # not with_suffix: a profile's name may hold a '.'


def _generate(path: Path) -> Path:
    """A new Ed25519 key (OpenSSH format) at ``path``, mode 0600, its ``.pub`` beside it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    k = Ed25519PrivateKey.generate()
    priv = k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    pub = k.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    write_private(path, priv)
    pub_path(path).write_bytes(pub + b" gpujob" + (b"-" + path.name.encode() if path != key_path() else b"") + b"\n")
    return path


def ensure_client_key() -> Path:
    """gpujob's shared client key, made on first use; its path."""
    path = key_path()
    return path if path.exists() else _generate(path)


def ensure_host_key(name: str) -> Path:
    """Profile ``name``'s own key, made if missing; its path."""
    path = host_key_path(name)
    return path if path.exists() else _generate(path)


def remove_host_key(name: str) -> None:
    for p in (host_key_path(name), pub_path(host_key_path(name))):
        p.unlink(missing_ok=True)


def client_key_for(name: str) -> Path:
    """The key profile ``name`` logs in with: its own when it has one, else the shared key."""
    own = host_key_path(name)
    return own if own.exists() else ensure_client_key()


def public_key_line(path: Path | None = None) -> str:
    """The public key line of ``path`` (default: the shared key)."""
    return pub_path(path or ensure_client_key()).read_text().strip()
