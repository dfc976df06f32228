"""gpujob's own SSH files on the laptop: its client keys (made on first use) and known_hosts.

Each profile added with the instance's password gets a key of its own (``keys/<name>_ed25519``),
so that one instance's ``authorized_keys`` unlocks no other: a provider, or whoever has the
instance next, learns nothing that opens the user's other instances (docs/security.md). The
shared key (``id_ed25519``) stays for profiles whose instance already accepted it.
The transport reads them only by the paths an ``Endpoint`` names (``Host.endpoint()``)."""

from __future__ import annotations

from pathlib import Path

from gpujob.config.paths import atomicfile, config_dir, write_private


def known_hosts_path() -> Path:
    return config_dir() / "known_hosts"


def key_path() -> Path:
    """The shared key: profiles whose instance accepted it before per-profile keys, and ``--no-check``."""
    return config_dir() / "id_ed25519"


def host_key_path(name: str) -> Path:
    """The key of profile ``name`` (it may not exist: the profile then uses the shared key)."""
    return config_dir() / "keys" / f"{name}_ed25519"


def pending_key_path(name: str) -> Path:
    """A new key of profile ``name`` while ``host rekey`` installs and tries it; renamed to
    ``host_key_path`` once the host takes it (one left behind is tried on the next rekey)."""
    return config_dir() / "keys" / f"{name}_ed25519.rekey"


def uses_shared_key(host: object) -> bool:
    """An SSH profile that logs in with the shared key: no key of its own, no ``--identity``."""
    name = getattr(host, "name", "")
    return (getattr(host, "kind", "ssh") == "ssh" and not getattr(host, "identity_file", None)
            and not host_key_path(name).exists())


def adopt_key(name: str, path: Path) -> Path:
    """Make the key at ``path`` (and its .pub) profile ``name``'s own; its new path.

    The .pub first, the key last (the rename that switches the profile): cut between them, the
    key is still at ``path`` for the next ``host rekey`` to adopt, its .pub made again from it."""
    own = host_key_path(name)
    pub = pub_path(path)
    if not pub.exists():  # an adopt cut after its first rename: the key holds its own public half
        import paramiko

        k = paramiko.Ed25519Key.from_private_key_file(str(path))
        pub.write_text(f"{k.get_name()} {k.get_base64()} gpujob-{name}\n")
    pub.replace(pub_path(own))
    path.replace(own)  # the profile logs in with it from here on
    return own


def pub_path(path: Path) -> Path:
    return path.with_name(path.name + ".pub")  # not with_suffix: a profile's name may hold a '.'


def generate(path: Path, comment: str | None = None) -> Path:
    """A new Ed25519 key (OpenSSH format) at ``path``, mode 0600, its ``.pub`` beside it (comment
    ``gpujob-<file name>``, or ``gpujob`` for the shared key)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    k = Ed25519PrivateKey.generate()
    priv = k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    pub = k.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    if comment is None:
        comment = "gpujob" + ("-" + path.name if path != key_path() else "")
    atomicfile().write(pub_path(path), pub + b" " + comment.encode() + b"\n", 0o644)
    write_private(path, priv)  # last: a private key there has its .pub beside it
    return path


def _ensure(path: Path) -> Path:
    """The key at ``path``, made once: commands that find it missing at the same moment wait for
    the one that makes it (two made at once paired one's .pub with the other's key)."""
    if path.exists():
        return path
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with atomicfile().locked(path):
        return path if path.exists() else generate(path)


def ensure_client_key() -> Path:
    """gpujob's shared client key, made on first use; its path."""
    return _ensure(key_path())


def ensure_host_key(name: str) -> Path:
    """Profile ``name``'s own key, made if missing; its path."""
    return _ensure(host_key_path(name))


def remove_host_key(name: str) -> None:
    for p in (host_key_path(name), pub_path(host_key_path(name))):
        p.unlink(missing_ok=True)
    remove_pending_key(name)


def remove_pending_key(name: str) -> None:
    for p in (pending_key_path(name), pub_path(pending_key_path(name))):
        p.unlink(missing_ok=True)


def client_key_for(name: str) -> Path:
    """The key profile ``name`` logs in with: its own when it has one, else the shared key."""
    own = host_key_path(name)
    return own if own.exists() else ensure_client_key()


def public_key_line(path: Path | None = None) -> str:
    """The public key line of ``path`` (default: the shared key)."""
    return pub_path(path or ensure_client_key()).read_text().strip()
