"""``feishu`` (alias ``lark``): a Feishu/Lark bot webhook, signed when a ``secret`` is set."""

import base64
import hashlib
import hmac
from typing import Mapping, Tuple

from remote.core.jsontypes import JSON, JSONObject

from .base import ChannelConfig, Request, register
from .http_client import HttpChannel, json_body, json_headers
from .render import fit


def feishu_sign(secret: str, timestamp_s: int) -> str:
    """Feishu/Lark's signature: base64(HmacSHA256(key="ts\\nsecret", msg=b""))."""
    key = ("%d\n%s" % (timestamp_s, secret)).encode("utf-8")
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode("ascii")


@register
class Feishu(HttpChannel):
    type = "feishu"
    aliases = ("lark",)
    required = (("url",),)
    optional = ("secret",)
    secret_keys = ("url", "secret")
    answers_json = True

    def request(self, ch: ChannelConfig, title: str, text: str, event: Mapping[str, object], now: float) -> Request:
        body: JSONObject = {"msg_type": "text", "content": {"text": fit("%s\n%s" % (title, text), 18000, True)}}
        if ch.get("secret"):
            ts = int(now)
            body = {"timestamp": str(ts), "sign": feishu_sign(ch["secret"], ts), **body}
        return Request(ch["url"], json_headers(), json_body(body))

    def answer(self, data: JSONObject) -> Tuple[JSON, JSON]:
        return data.get("code", data.get("StatusCode", 0)), data.get("msg", data.get("StatusMessage"))
