"""JSON as ``json.loads`` returns it, for documents whose keys are not ours to know (a server's
answer, a user's params): the leaves are concrete, so a reader narrows before it uses one."""

from __future__ import annotations

from typing import Union

JSON = Union[None, bool, int, float, str, list["JSON"], dict[str, "JSON"]]
JSONObject = dict[str, JSON]
