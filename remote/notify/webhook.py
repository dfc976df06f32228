"""``webhook`` (alias ``generic``): the event as JSON, signed with HMAC-SHA256 when a secret is set."""

import hashlib
import hmac
from typing import List, Mapping

from .base import ChannelConfig, Request, register
from .http_client import HttpChannel, json_body, json_headers


def webhook_signature(secret: str, body: bytes) -> str:
    """The generic webhook's ``X-Gpujob-Signature`` value: ``sha256=<hex HMAC-SHA256(secret, body)>``."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


@register
class Webhook(HttpChannel):
    type = "webhook"
    aliases = ("generic",)
    required = (("url",),)
    optional = ("secret", "headers")
    secret_keys = ("url", "secret", "headers")
    non_string_keys = ("headers",)

    def validate(self, ch: Mapping[str, object], where: str) -> List[str]:
        h = ch.get("headers")
        if h is not None and (not isinstance(h, dict) or not all(isinstance(v, str) for v in h.values())):
            return ["%s.headers: must be a mapping of strings" % where]
        return []

    def request(self, ch: ChannelConfig, title: str, text: str, event: Mapping[str, object], now: float) -> Request:
        ts = int(now)
        payload = dict(event)
        payload.update({"title": title, "text": text, "timestamp": ts, "source": "gpujob"})
        raw = json_body(payload)
        headers = json_headers()
        headers.update({str(k): str(v) for k, v in (ch.get("headers") or {}).items()})
        headers["X-Gpujob-Timestamp"] = str(ts)
        headers["X-Gpujob-Event"] = str(event.get("event", ""))
        if ch.get("secret"):
            headers["X-Gpujob-Signature"] = webhook_signature(ch["secret"], raw)
        return Request(ch["url"], headers, raw)
