"""JSON as ``json.loads`` returns it, for documents whose keys are not ours to know (a channel's
answer, a user's metrics line): the leaves are concrete, so a reader narrows before it uses one."""

from typing import Dict, List, Union

JSON = Union[None, bool, int, float, str, List["JSON"], Dict[str, "JSON"]]
JSONObject = Dict[str, JSON]


def is_object(v: object) -> bool:
    """A JSON object? (a bool, not ``isinstance``, where the caller's declared row type is to stay)"""
    return isinstance(v, dict)
