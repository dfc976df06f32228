"""The agent's ``submit`` command started while the upload runs.

A submit is two commands on the host: the sync, then ``submit`` (the job's code snapshot, its
data view, its supervisor). Each command starts a login shell and a Python there (0.2 s of CPU,
0.5-1 s on a busy instance), so the second one is started as soon as the upload's stream begins
and waits for its request on stdin: its start is off the critical path. Given no request (the
sync failed, or was interrupted), it sees its stdin end and exits having done nothing
(``remote/verbs/jobs.py``). Where it cannot be used (it could not start, or the agent was not
installed yet) the caller asks the usual way; once its request is written, its answer or the
link's failure is the submit's, never a second request.
"""

from __future__ import annotations

import threading
from typing import Any

from gpujob.jsontypes import JSONObject
from gpujob.transport import replies
from gpujob.transport.agent import NEED_AGENT, Agent
from gpujob.transport.base import Result


class EarlySubmit:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.s: Any = None
        self.opening: threading.Thread | None = None

    def start(self) -> None:
        """Start the command (its channel opens in a thread: no round trip on the upload's path)."""
        if self.opening is None:
            self.opening = threading.Thread(target=self._open, name="gpujob-submit-open", daemon=True)
            self.opening.start()

    def _open(self) -> None:
        try:
            self.s = self.agent.t.stream(self.agent.command("submit"))
        except Exception:  # noqa: BLE001 - the usual call says what is wrong, if anything is
            self.s = None

    def _taken(self) -> Any:
        if self.opening is None:
            return None
        self.opening.join()
        s, self.s, self.opening = self.s, None, None
        return s

    def call(self, request: bytes) -> JSONObject | None:
        """The agent's answer to ``request``; None when there is no started command to ask."""
        s = self._taken()
        if s is None:
            return None
        most = replies.limit("submit")
        timer = threading.Timer(replies.timeout("submit"), s.kill)  # as agent.call's own limit
        timer.daemon = True
        timer.start()
        try:
            try:
                s.stdin.write(request)
                s.stdin.flush()
            except (OSError, EOFError):
                pass  # it ended before its request: its exit status says why
            s.close_stdin()
            try:
                out = s.stdout.read(most + 1)
                rc = s.wait(60)
            except (OSError, EOFError, TimeoutError):
                out, rc = b"", -1
        finally:
            timer.cancel()
        if rc == NEED_AGENT:  # started before the sync installed the agent: nothing ran
            return None
        return self.agent._parse("submit", Result(rc, out, s.stderr_text().encode()), None)

    def cancel(self) -> None:
        """No request will come: the command sees its stdin end and exits."""
        s = self._taken()
        if s is not None:
            s.close_stdin()
            try:
                s.wait(10)
            except (OSError, EOFError, TimeoutError):
                s.kill()
