"""AutoDL's Pro instance API as power commands (docs/power.md), through httpx:

    python -m gpujob.usecases.power.autodl on|off|state|address INSTANCE_UUID

The token is ``AUTODL_TOKEN`` (put it in the secrets file: power commands get its entries in
their environment); ``GPUJOB_AUTODL_API`` replaces ``https://api.autodl.com``. ``on`` asks for
the GPU payload; a refusal prints AutoDL's message on stderr (its "资源不足", no GPU free, is
what the default ``power.stock_out`` pattern knows). ``state`` prints AutoDL's status word;
``address`` the snapshot's ssh command. Only Pro container instances have this API.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from gpujob.jsontypes import JSONObject

API = "https://api.autodl.com/api/v1/dev/instance/pro/"


def call(verb: str, uuid: str) -> Any:
    """AutoDL's ``data`` for ``verb``; SystemExit with its message when it refuses."""
    import httpx

    token = os.environ.get("AUTODL_TOKEN")
    if not token:
        sys.exit("AUTODL_TOKEN is not set: put AUTODL_TOKEN=... in gpujob's secrets file (docs/power.md)")
    base = os.environ.get("GPUJOB_AUTODL_API", API).rstrip("/") + "/"
    headers = {"Authorization": token}  # AutoDL takes the raw token, no "Bearer"
    with httpx.Client(timeout=30) as c:
        if verb in ("on", "off"):
            body: JSONObject = {"instance_uuid": uuid}
            if verb == "on":
                body["payload"] = "gpu"
            r = c.post(base + ("power_on" if verb == "on" else "power_off"), json=body, headers=headers)
        else:
            r = c.get(base + ("status" if verb == "state" else "snapshot"), params={"instance_uuid": uuid}, headers=headers)
    try:
        doc = r.json()
    except ValueError:
        sys.exit(f"AutoDL answered HTTP {r.status_code} without JSON")
    if doc.get("code") != "Success":
        sys.exit(f"AutoDL refused {verb}: {doc.get('msg') or doc.get('code')}")
    return doc.get("data")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("on", "off", "state", "address"):
        print("usage: python -m gpujob.usecases.power.autodl on|off|state|address INSTANCE_UUID", file=sys.stderr)
        return 2
    data = call(argv[0], argv[1])
    if argv[0] == "state":
        print(data.get("status") if isinstance(data, dict) else data)
    elif argv[0] == "address":
        snap = data if isinstance(data, dict) else {}
        print(snap.get("ssh_command") or f"ssh -p {snap.get('ssh_port')} root@{snap.get('ssh_host') or snap.get('host')}")
    else:
        print(f"{argv[0]}: accepted")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
