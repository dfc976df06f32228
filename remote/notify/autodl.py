"""``autodl`` (aliases ``wechat``, ``autodl_wechat``): AutoDL's WeChat push by account ``token``,
rate-limited on this side as AutoDL limits it (5 a minute, 50 a day)."""

import hashlib
import time
from typing import Mapping, Optional, Tuple

from remote.core.jsontypes import JSON, JSONObject

from . import ratelimit
from .base import ChannelConfig, Request, register
from .http_client import HttpChannel, json_body, json_headers
from .render import fit

AUTODL_URL = "https://www.autodl.com/api/v1/wechat/message/send"
AUTODL_PER_MINUTE = 5
AUTODL_PER_DAY = 50


@register
class AutoDL(HttpChannel):
    type = "autodl"
    aliases = ("wechat", "autodl_wechat")
    required = (("token",),)
    optional = ("url",)
    secret_keys = ("token",)
    answers_json = True

    def skip_reason(self, resolved: ChannelConfig, state_dir: Optional[str]) -> Optional[str]:
        key = hashlib.sha256(str(resolved.get("token")).encode()).hexdigest()[:16]
        return ratelimit.take(state_dir, "autodl", "AutoDL", key, time.time(), AUTODL_PER_MINUTE, AUTODL_PER_DAY)

    def request(self, ch: ChannelConfig, title: str, text: str, event: Mapping[str, object], now: float) -> Request:
        url = ch.get("url") or AUTODL_URL
        name = event.get("name") or event.get("job_id") or "gpujob"
        body = {"title": fit(title, 64), "name": fit(str(name), 64), "content": fit(text, 4000)}
        return Request(url, {"Authorization": ch["token"], **json_headers()}, json_body(body))

    def answer(self, data: JSONObject) -> Tuple[JSON, JSON]:
        code = data.get("code")
        return (0 if code == "Success" else code), data.get("msg")
