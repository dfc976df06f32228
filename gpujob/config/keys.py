"""gpujob's own SSH files on the laptop: its client key (made on first use) and known_hosts.

The transport reads them only by the paths an ``Endpoint`` names (``Host.endpoint()``)."""

from __future__ import annotations

from pathlib import Path

from gpujob.config.paths import config_dir, write_private


def known_hosts_path() -> Path:
    return config_dir() / "known_hosts"


def key_path() -> Path:
    return config_dir() / "id_ed25519"


def ensure_client_key() -> Path:
    """gpujob's own client key (Ed25519, OpenSSH format), made on first use; its path."""
    path = key_path()
    if not path.exists():
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        k = Ed25519PrivateKey.generate()
        priv = k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
        pub = k.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        write_private(path, priv)
        path.with_suffix(".pub").write_bytes(pub + b" gpujob\n")
    return path


def public_key_line() -> str:
    return ensure_client_key().with_suffix(".pub").read_text().strip()
