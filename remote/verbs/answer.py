"""How a verb answers: one JSON document on stdout, an error as a document with its exit status
(3: the user's to fix, a full disk included; 4: an agent error, logged with its traceback)."""

import errno
import json
import sys
from typing import Any, Optional, Tuple

from remote.core.errors import AgentError
from remote.core.layout import Root, agent_log


def out(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, sort_keys=True))
    sys.stdout.write("\n")
    sys.stdout.flush()


def handled(root: Root, verb: str, call: Any, write: Any) -> Tuple[Optional[int], Any]:
    """``call()``'s result as ``(None, result)``; an error is written with ``write`` as its
    document and gives ``(exit status, None)``."""
    try:
        return None, call()
    except AgentError as e:
        write({"error": e.message, "remedy": e.remedy, "code": e.code})
        return 3, None
    except BrokenPipeError:
        return 0, None
    except OSError as e:  # a full disk is the user's to fix: say so, not "agent error"
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            return failed(root, verb, e, write), None
        agent_log(root, "verb {}: disk full: {}".format(verb, e))
        write({"error": "the disk under {} is full ({}: {})".format(root.root, e.filename or verb, e.strerror),
               "remedy": "free space there (gpujob doctor shows each disk; gpujob gc and gpujob rm remove what "
                         "old jobs left), then run the command again", "code": "disk_full"})
        return 3, None
    except Exception as e:
        return failed(root, verb, e, write), None


def failed(root: Root, verb: str, e: BaseException, write: Any) -> int:
    """An error nobody foresaw: logged with its traceback, answered as ``agent_error``."""
    import traceback  # here: every verb's start would pay for it (and its linecache, tokenize)

    agent_log(root, "verb {} failed: {}\n{}".format(verb, e, traceback.format_exc()))
    write({"error": "agent error in {}: {}".format(verb, e), "remedy": "see {}".format(root.agent_log),
           "code": "agent_error"})
    return 4
