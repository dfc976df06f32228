"""Client-side rate limits that outlive the process: the sends of the last day, per key, in a
small 0600 state file under the agent's root (in memory when there is no state folder)."""

import os
from typing import Dict, List, Optional

from remote.core import atomicfile

_MEM: Dict[str, Dict[str, List[float]]] = {}


def take(state_dir: Optional[str], limiter: str, who: str, key: str, now: float, per_minute: int,
         per_day: int) -> Optional[str]:
    """Record one send for ``key``, or say why not (``per_minute`` a minute, ``per_day`` a rolling
    day, as ``who`` allows) in ``notify_<limiter>_rate.json`` (read, decided and written under the
    file's lock: supervisors of several jobs notify at once)."""
    if not state_dir:
        return _take(_MEM.setdefault(limiter, {}), who, key, now, per_minute, per_day)
    path = os.path.join(state_dir, "notify_%s_rate.json" % limiter)
    said = []  # type: List[Optional[str]]

    def edit(data: Dict[str, List[float]]) -> bool:
        said.append(_take(data, who, key, now, per_minute, per_day))
        return said[-1] is None

    try:
        os.makedirs(state_dir, exist_ok=True)
        atomicfile.update_json(path, edit, 0o600, durable=False)
    except OSError:  # no state kept (a read-only or full disk): this send is judged alone
        if not said:
            said.append(_take({}, who, key, now, per_minute, per_day))
    return said[-1]


def _take(data: Dict[str, List[float]], who: str, key: str, now: float, per_minute: int, per_day: int) -> Optional[str]:
    """Judge one send for ``key`` against ``data`` (recorded there when allowed)."""
    stamps = [float(x) for x in data.get(key, []) if isinstance(x, (int, float)) and now - float(x) < 86400]
    if sum(1 for x in stamps if now - x < 60) >= per_minute:
        return "rate-limited (%s allows %d a minute)" % (who, per_minute)
    if len(stamps) >= per_day:
        return "rate-limited (%s allows %d a day)" % (who, per_day)
    stamps.append(now)
    data[key] = stamps
    return None
