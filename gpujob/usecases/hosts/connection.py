"""``host rm``, ``host disconnect`` and ``host trust``: a profile's connection side (the kept connection, its key)."""

from __future__ import annotations

from gpujob.config.hosts import LOCAL, HostStore
from gpujob.errors import HostError
from gpujob.jsontypes import JSONObject


def remove_host(name: str, store: HostStore | None = None) -> JSONObject:
    """Forget the profile; a kept connection to it closes too."""
    from gpujob.transport import mux

    store = store or HostStore()
    from gpujob.config.keys import remove_host_key

    host = store.get(name, checked=False)  # the way out of a profile refused at use
    store.remove(name)
    remove_host_key(name)  # its own key, if it had one: authorized only on that instance
    if host.kind != LOCAL:
        mux.disconnect(host)
    return {"removed": name}


def disconnect_host(name: str, store: HostStore | None = None) -> JSONObject:
    """Close the connection kept open to the host between commands; ``closed``: there was one."""
    from gpujob.transport import mux

    host = (store or HostStore()).get(name)
    return {"host": host.name, "closed": host.kind != LOCAL and mux.disconnect(host)}


def trust_host(name: str, store: HostStore | None = None) -> JSONObject:
    """Forget the host's recorded key and record the one it offers now (after an image change)."""
    from gpujob.transport import mux
    from gpujob.transport.ssh import forget_host_key, open_client

    host = (store or HostStore()).get(name)
    if host.kind == LOCAL:  # no SSH, so no key to trust (it read the ssh_config of a hostname '.')
        raise HostError("'local' is this machine: it has no host key to trust", "gpujob host trust NAME is for SSH profiles (gpujob host ls)")
    mux.disconnect(host)  # a kept connection still talks to the old key's server
    forget_host_key(host)
    open_client(host).close()
    return {"trusted": host.name, "address": host.address}
