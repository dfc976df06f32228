"""Client-side rate limits that outlive the process: the sends of the last day, per key, in a
small 0600 state file under the agent's root (in memory when there is no state folder)."""

import json
import os
from typing import Dict, List, Optional

_MEM: Dict[str, Dict[str, List[float]]] = {}


def take(state_dir: Optional[str], limiter: str, who: str, key: str, now: float, per_minute: int,
         per_day: int) -> Optional[str]:
    """Record one send for ``key``, or say why not (``per_minute`` a minute, ``per_day`` a rolling
    day, as ``who`` allows) in ``notify_<limiter>_rate.json``."""
    path = os.path.join(state_dir, "notify_%s_rate.json" % limiter) if state_dir else None
    data: Dict[str, List[float]] = {}
    if path:
        try:
            with open(path) as f:
                data = json.load(f)
            if not isinstance(data, dict):
                data = {}
        except (OSError, ValueError):
            data = {}
    else:
        data = _MEM.setdefault(limiter, {})
    stamps = [float(x) for x in data.get(key, []) if isinstance(x, (int, float)) and now - float(x) < 86400]
    if sum(1 for x in stamps if now - x < 60) >= per_minute:
        return "rate-limited (%s allows %d a minute)" % (who, per_minute)
    if len(stamps) >= per_day:
        return "rate-limited (%s allows %d a day)" % (who, per_day)
    stamps.append(now)
    data[key] = stamps
    if path:
        try:
            os.makedirs(state_dir, exist_ok=True)
            tmp = path + ".tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        except OSError:
            pass
    return None
