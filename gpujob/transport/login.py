"""A login that fails is said as what it is: the host answered, and refused the key (of any type,
named), or asked for more than a key (a second factor), or offers nothing gpujob speaks (no key
logins, no common key exchange, cipher, MAC or host key algorithm). None of these is "is the
instance powered on?": that remedy belongs to a host that did not answer (``ssh._no_answer``).

paramiko's ``SSHClient`` blurs them: it tried an RSA key file as each key class in turn and raised
the last class's "Invalid key" over the server's refusal, and it takes a key's partial success
(``AuthenticationMethods publickey,keyboard-interactive``) as a cue to prompt on the terminal
(``auth_interactive_dumb``), then reports the prompt's failure as a refused key. Here the key is
loaded once by its own type, and a partial success ends the login at once (``SecondFactorAsked``)."""

from __future__ import annotations

# isort: off
import gpujob.transport.paramiko_load  # noqa: F401  (first: paramiko without invoke and importlib.metadata)
import paramiko
# isort: on

from gpujob.errors import ConnectError, HostError
from gpujob.transport.endpoint import Endpoint


class NotReached(ConnectError):
    """No SSH server answered: the name does not resolve, the port refused or the link carried nothing
    (the only cases for "is the instance powered on?")."""


class KeyRefused(ConnectError):
    """The host answered and refused the key (the remedy installs or names the key it accepts).
    ``methods``: the login methods it offers (None: not told), so ``host add`` asks for no password
    a host without password logins would refuse."""

    methods: list[str] | None = None


class LoginPolicy(ConnectError):
    """The host answered; its login asks for what gpujob does not do (a second factor, a method other
    than a key, an algorithm paramiko lacks). A key re-install cannot help: the remedy is the server's."""


class SecondFactorAsked(Exception):
    """The host accepted a key (or a password) and asks for more: ``methods``, its partial success.
    Not an ``SSHException``: paramiko's login loop would catch it, try the next key and prompt."""

    def __init__(self, methods: list[str]) -> None:
        super().__init__(f"partial success; the server asks next for: {', '.join(methods)}")
        self.methods = list(methods)


def check_full(allowed: list[str]) -> list[str]:
    """What paramiko's ``auth_*`` returned: empty once logged in; a partial success's methods end the login."""
    if allowed:
        raise SecondFactorAsked(allowed)
    return allowed


def load_identity(path: str) -> paramiko.PKey | None:
    """The key in ``path`` as its own type (RSA, ECDSA, Ed25519, with its ``-cert.pub``); None when a
    passphrase protects it (an ssh-agent may hold it: gpujob never asks for a passphrase)."""
    try:
        return paramiko.PKey.from_path(path)
    except (TypeError, paramiko.PasswordRequiredException):  # cryptography: "Password was not given but private key is encrypted"
        return None
    except (ValueError, paramiko.SSHException, OSError) as e:
        raise HostError(f"cannot read the key {path}: {e}",
                        "give an RSA, ECDSA or Ed25519 private key in OpenSSH or PEM format: "
                        "gpujob host set NAME --identity ~/.ssh/KEY") from None


def describe(host: Endpoint, key: paramiko.PKey | None) -> str:
    """The key a login offered, as the user can find it in the host's authorized_keys."""
    path = host.identity_file or host.client_key
    whose = "the key" if host.identity_file else "gpujob's key"
    return f"{whose} ({path}, {key.get_name()} {key.fingerprint})" if key is not None else f"{whose} ({path})"


def offered(client: paramiko.SSHClient, user: str) -> list[str] | None:
    """The login methods the server offers, asked on the connection a login just failed on (a "none"
    request: its refusal lists them); None when it cannot be told."""
    tr = client.get_transport()
    if tr is None or not tr.is_active():
        return None
    try:
        tr.auth_none(user)
    except paramiko.BadAuthenticationType as e:
        return list(e.allowed_types)
    except (paramiko.SSHException, OSError, EOFError):
        return None
    return None


def password_refused(host: Endpoint, methods: list[str] | None) -> ConnectError:
    """The host refused the password ``host add`` gave: a wrong one, or a server that takes no password
    login at all (PasswordAuthentication no), which no password can open."""
    if methods is None or "password" in methods:
        return ConnectError(f"{host.address} refused the password",
                            "copy the root password again from the console (it can change after a restart) and retry")
    asked = " (the password was refused at its keyboard-interactive prompt too)" if "keyboard-interactive" in methods else ""
    return LoginPolicy(
        f"{host.address} takes no password login for {host.user}: its sshd has password logins off "
        f"(PasswordAuthentication no) and offers {', '.join(methods) or 'no method'}{asked}",
        f"no password can install a key there: put a public key of yours in the instance's ~/.ssh/authorized_keys "
        f"(its provider's web terminal or key settings), then gpujob host add {host.name} --ssh \"ssh -p {host.port} "
        f"{host.user}@{host.hostname}\" --identity ~/.ssh/KEY")


def refused(host: Endpoint, e: paramiko.AuthenticationException, key: paramiko.PKey | None,
            locked: bool, methods: list[str] | None = None, agent_keys: int = 0) -> ConnectError:
    """The host answered and refused the login: the key (and ``agent_keys`` keys of the user's ssh-agent,
    offered after it), or the key login itself (its policy)."""
    allowed = getattr(e, "allowed_types", None)
    if isinstance(e, paramiko.BadAuthenticationType) and allowed is not None and "publickey" not in allowed:
        return LoginPolicy(
            f"{host.address} answered but takes no key login for {host.user}: it offers only "
            f"{', '.join(allowed) or 'no method'}",
            "gpujob logs in with a key (a password is used once, by gpujob host add, to install it): allow key "
            f"logins for {host.user} in the server's sshd_config (PubkeyAuthentication yes), or ask its admin")
    if locked:
        return locked_key(host)
    err = _key_refused(host, key, f" and the {agent_keys} key(s) your ssh-agent holds" if agent_keys else "")
    err.methods = methods
    return err


def _key_refused(host: Endpoint, key: paramiko.PKey | None, also: str) -> KeyRefused:
    if host.identity_file:
        rsa = (" (an RSA key signs with rsa-sha2-256/512: a server that takes only ssh-rsa refuses it, "
               "PubkeyAcceptedAlgorithms)") if key is not None and "rsa" in key.get_name() else ""
        return KeyRefused(
            f"{host.address} refused {describe(host, key)}{also}",
            f"check that {host.identity_file}.pub is in the instance's ~/.ssh/authorized_keys for {host.user}{rsa}, "
            f"or give the key it accepts (gpujob host set {host.name} --identity ~/.ssh/KEY), or let gpujob install "
            f"its own with the instance's password: gpujob host add {host.name} --ssh \"ssh -p {host.port} "
            f"{host.user}@{host.hostname}\" --force")
    return KeyRefused(
        f"{host.address} refused {describe(host, key)}{also}",
        f"install the key with the instance's password: gpujob host add {host.name} --ssh \"ssh -p {host.port} "
        f"{host.user}@{host.hostname}\" --force")


def agent_key_count() -> int:
    """How many keys the user's ssh-agent holds (0: none, or no agent): a refusal names them too."""
    try:
        agent = paramiko.Agent()
    except (paramiko.SSHException, OSError):
        return 0
    try:
        return len(agent.get_keys())
    finally:
        agent.close()


def locked_key(host: Endpoint) -> ConnectError:
    """The profile's key needs its passphrase and no ssh-agent key opened the login."""
    return ConnectError(
        f"cannot log in to {host.address}: the key {host.identity_file} is protected by a passphrase and no "
        "ssh-agent key was accepted",
        f"load it into your ssh-agent (ssh-add {host.identity_file}; gpujob never asks for a passphrase), "
        "then run the command again")


def second_factor(host: Endpoint, methods: list[str], key: paramiko.PKey | None, password: bool) -> LoginPolicy:
    """The key (or the password) was accepted and the host asks for another method as well."""
    first = "the password" if password else describe(host, key)
    return LoginPolicy(
        f"{host.address} accepted {first} and then asks for a second factor ({', '.join(methods)}): "
        "its sshd requires more than one login method (AuthenticationMethods)",
        "gpujob logs in with a key alone and answers no prompt: ask the host's admin for a key-only login for "
        f"{host.user} (a Match block with AuthenticationMethods publickey); meanwhile gpujob ssh {host.name} "
        "(OpenSSH) can answer the prompt by hand")


# paramiko's IncompatiblePeer text → what is missing, the sshd_config keyword that allows it, paramiko's list
_WHAT = {"kex": ("key exchange algorithm", "KexAlgorithms", "_preferred_kex"),
         "host key": ("host key algorithm", "HostKeyAlgorithms", "_preferred_keys"),
         "ciphers": ("cipher", "Ciphers", "_preferred_ciphers"), "macs": ("MAC", "MACs", "_preferred_macs"),
         "compression": ("compression", "Compression", "_preferred_compression"),
         "version": ("protocol version", "Protocol", "")}


def incompatible(host: Endpoint, e: Exception) -> LoginPolicy | None:
    """paramiko's ``IncompatiblePeer`` (no algorithm in common) as the server's policy; None for any other error."""
    if not isinstance(e, paramiko.ssh_exception.IncompatiblePeer):
        return None
    text = str(e)
    what, keyword, attr = next((v for k, v in _WHAT.items() if k in text), ("algorithm", "its algorithm lists", ""))
    ours = getattr(paramiko.Transport, attr, ()) if attr else ()
    return LoginPolicy(
        f"{host.address} answered, but it and gpujob share no {what}: its sshd allows none that paramiko speaks ({text})",
        (f"allow one of gpujob's in the server's sshd_config ({keyword} {','.join(ours)}), " if ours else
         f"allow SSH-2 in the server's sshd_config ({keyword}), ") +
        "or ask its admin to; the host is up, so nothing on this side will change it")
