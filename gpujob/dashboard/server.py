"""``gpujob ui``: bind 127.0.0.1 on a free port, print the URL with a fresh token, serve until Ctrl-C."""

from __future__ import annotations

import json
import secrets
import socket
import sys
from pathlib import Path
from typing import Any

from gpujob.errors import GpujobError


def _deps() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise GpujobError(f"gpujob ui needs the 'ui' extra ({e.name} is not installed)",
                          "pip install 'gpujob[ui]'  (Starlette and uvicorn)") from None


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as e:
        sock.close()
        raise GpujobError(f"cannot listen on 127.0.0.1:{port}: {e.strerror}",
                          "leave --port out for a free one, or pick another") from None
    sock.listen(128)
    return sock


def landing(url: str) -> Path:
    """A page only this user can read that sends the browser on to ``url``: what ``--open`` hands the
    browser, so that nothing secret is in a process's argv (``ps`` shows those to every local user).
    ``url`` carries a one-time ticket, not the token: the first visit spends it and deletes the page."""
    import html
    import os
    import tempfile

    from gpujob.config.paths import state_dir

    fd, name = tempfile.mkstemp(prefix="ui-", suffix=".html", dir=str(state_dir()))  # mode 0600
    with os.fdopen(fd, "w") as f:
        target = html.escape(url, quote=True)
        f.write(f'<!doctype html><meta http-equiv="refresh" content="0;url={target}">'
                f'<a href="{target}">gpujob ui</a>\n')
    return Path(name)


def host_names(client: Any, only: str | None) -> list[str]:
    """The hosts shown: ``--host a,b``, else every profile (``local`` first)."""
    known = [h.name for h in client.hosts.all()]
    if not only:
        return known
    names = [n.strip() for n in only.split(",") if n.strip()]
    for n in names:
        client.hosts.get(n)  # an unknown name: its HostError says which exist
    return names


def serve(port: int = 0, only: str | None = None, interval: float = 3.0, open_browser: bool = False,
          as_json: bool = False, pull_dir: str = "gpujob-pulls") -> int:
    _deps()
    import uvicorn

    from gpujob.api import Client
    from gpujob.dashboard.app import build_app
    from gpujob.dashboard.hub import Hub

    with Client() as c:
        hosts = host_names(c, only)
    sock = _bind(port)
    bound = sock.getsockname()[1]
    token = secrets.token_urlsafe(24)
    url = f"http://127.0.0.1:{bound}/?token={token}"
    hub = Hub(hosts, interval=interval).start()
    server: Any = None  # the streams ask it whether Ctrl-C came
    ticket = secrets.token_urlsafe(24) if open_browser else None
    page = landing(f"http://127.0.0.1:{bound}/?ticket={ticket}") if ticket else None
    app = build_app(hub, token, lambda: bound, pull_dir=pull_dir, stopping=lambda: bool(server and server.should_exit),
                    ticket=ticket, on_ticket=page.unlink if page else None)
    if as_json:
        print(json.dumps({"url": url, "port": bound, "hosts": hosts}), flush=True)
    else:
        print(f"gpujob ui: {url}\n  hosts: {', '.join(hosts)} · Ctrl-C stops", flush=True)
    if page is not None:
        why = _open_in_browser(page.as_uri())
        if why:
            print(f"gpujob ui: {why} (--open): open the URL above", file=sys.stderr, flush=True)
    # no access log: every request line would carry the token
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                           timeout_graceful_shutdown=5))
    try:
        server.run(sockets=[sock])
    finally:
        hub.close()
        sock.close()
        if page is not None:
            page.unlink(missing_ok=True)
    sys.stdout.flush()
    return 0


# what Python's webbrowser falls back to without a display: they would share this terminal with the server
CONSOLE_BROWSERS = {"www-browser", "links", "links2", "elinks", "lynx", "w3m"}


def _open_in_browser(uri: str) -> str | None:
    """Open ``uri`` in a graphical browser (or ``$BROWSER``, the user's own choice); else why not."""
    import os
    import webbrowser

    if not os.environ.get("BROWSER"):
        try:
            chosen = webbrowser.get()
        except webbrowser.Error:
            return "no browser could be started"
        if Path(getattr(chosen, "name", "") or "").name in CONSOLE_BROWSERS:
            return "no graphical browser here (only a text one, which would take over this terminal)"
    return None if webbrowser.open(uri) else "no browser could be started"
