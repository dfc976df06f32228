"""``serve``: the kept agent process the laptop's connection multiplexer holds open, answering quick
read-only verbs (``SERVED``) one JSON line in, one out, until stdin closes."""

import base64
import io
import json
import os
import sys
from typing import Callable, List

from remote.core.layout import Root
from remote.core.protocol import SERVED


def serve(root: Root, main: Callable[[List[str]], int]) -> None:
    """Answer quick read-only verbs, one JSON line in and one out, until stdin closes.

    The laptop's connection multiplexer keeps this process open so that ``status`` or
    ``watch`` costs one round trip and no Python start. A request is ``{"argv": [VERB, ...]}``
    with an optional ``"input"`` (base64: the verb's stdin, e.g. a small upload for
    ``receive``); the answer is ``{"rc", "out", "err"}``, what a one-shot command would give.
    """
    real_out, real_err, real_in = sys.stdout, sys.stderr, sys.stdin
    env = dict(os.environ)
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            return
        try:
            req = json.loads(line.decode("utf-8"))
            argv = [str(x) for x in req["argv"]]
        except (ValueError, KeyError, TypeError):
            req, argv = {}, []
        if not argv or argv[0] not in SERVED:
            answer = {"rc": 2, "out": "", "err": "serve answers only: {}\n".format(", ".join(SERVED))}
        else:
            os.environ.clear()
            os.environ.update(env)  # agent.env is read afresh for every request
            out, err = io.StringIO(), io.StringIO()
            data = base64.b64decode(req.get("input") or "")
            sys.stdout, sys.stderr = out, err
            sys.stdin = io.TextIOWrapper(io.BytesIO(data))  # what a one-shot command reads on stdin
            try:
                rc = main(["--root", str(root.root), *argv])
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 2
            finally:
                sys.stdout, sys.stderr, sys.stdin = real_out, real_err, real_in
            answer = {"rc": rc, "out": out.getvalue(), "err": err.getvalue()}
        real_out.write(json.dumps(answer) + "\n")
        real_out.flush()
