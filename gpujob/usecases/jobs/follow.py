"""``gpujob pull JOB --follow``: the laptop as a mirror of the job's checkpoints.

Every ``interval`` seconds: read the job's state, then pull its newest complete checkpoint
(``pull --latest``: only what is missing or changed travels, a cut pull resumes). When the state
read before a pull was final, that pull had the last checkpoint and the follow ends. A dropped
link or a sleeping laptop is waited out (the connection is opened again, with a growing pause);
a job that does not exist, or was removed meanwhile, is not: it ends the follow as it ends a plain
pull (exit 2). A second run into the same folder starts where the first stopped.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from gpujob.errors import ConnectError, GpujobError, JobNotFound, RemoteError
from gpujob.jsontypes import JSONObject
from gpujob.usecases.jobs.ops import FINAL

Note = Callable[[str], None]
MAX_PAUSE = 120.0


def follow(pull_once: Callable[[], dict[str, Any]], state: Callable[[], str], reconnect: Callable[[], None],
           interval: float = 30.0, note: Note = lambda s: None, sleep: Callable[[float], None] = time.sleep
           ) -> JSONObject:
    """Pull until the job ends; returns {job_id, dest, pulled: [checkpoints in the order they came], state}."""
    pulled: list[str] = []
    last: dict[str, Any] = {}
    refused: dict[str, str] = {}  # names refused by any pull of the follow (an older checkpoint's stay refused)
    pause = interval
    while True:
        try:
            st = state()
            try:
                last = pull_once()
            except RemoteError as e:
                if "no complete checkpoint" not in str(e):
                    raise
                note("no complete checkpoint yet")
            for rel in last.get("refused") or []:
                if rel not in refused:
                    refused[rel] = (last.get("refused_why") or {}).get(rel, "")
                    # the name itself is the host's text: named when the follow ends, through the one sanitiser
                    note(f"a file NOT pulled: {refused[rel] or 'a name gpujob does not write here'} (named at the end)")
            sel = last.get("selected")
            # a checkpoint saved again under its name (ckpt.pt) is a new version: judged by what travelled
            if sel and (not pulled or pulled[-1] != sel or last.get("selected_fetched")):
                note(f"pulled {sel}" + (" (a new version)" if sel in pulled else ""))
                pulled.append(sel)
            if st in FINAL:
                return {**last, "pulled": pulled, "state": st, "refused": sorted(refused), "refused_why": refused}
            pause = interval
        except JobNotFound:  # no such job, or removed meanwhile (rm from another terminal): no wait brings it back
            raise
        except (ConnectError, RemoteError) as e:  # a dropped link, a laptop that slept: try again
            note(f"{e}; trying again in {pause:.0f} s")
            reconnect()
            sleep(pause)
            pause = min(MAX_PAUSE, interval * 4, pause * 2)
            continue
        except GpujobError:
            raise
        sleep(interval)
