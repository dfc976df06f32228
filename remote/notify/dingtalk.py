"""``dingtalk``: a DingTalk (钉钉) robot by URL or ``access_token``, signed when a ``secret`` is set;
an optional ``keyword`` the robot's security setting demands."""

import base64
import hashlib
import hmac
import urllib.parse
from typing import Mapping

from .base import ChannelConfig, Request, register
from .http_client import RobotChannel, json_body, json_headers
from .render import defanged, fit


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """DingTalk's signature, already URL-encoded: urlencode(base64(HmacSHA256(secret, "ts\\nsecret")))."""
    msg = ("%d\n%s" % (timestamp_ms, secret)).encode("utf-8")
    digest = hmac.new(secret.encode("utf-8"), msg, hashlib.sha256).digest()
    return urllib.parse.quote_plus(base64.b64encode(digest).decode("ascii"))


@register
class DingTalk(RobotChannel):
    type = "dingtalk"
    required = (("url", "access_token"),)
    optional = ("secret", "keyword", "msgtype")
    secret_keys = ("url", "access_token", "secret")
    default_url = "https://oapi.dingtalk.com/robot/send"
    token_key = "access_token"

    def request(self, ch: ChannelConfig, title: str, text: str, event: Mapping[str, object], now: float) -> Request:
        url = self.url(ch)
        if ch.get("secret"):
            ts = int(now * 1000)
            url = url + ("&" if "?" in url else "?") + "timestamp=%d&sign=%s" % (ts, dingtalk_sign(ch["secret"], ts))
        kw = ch.get("keyword")
        if kw and kw not in title and kw not in text:
            title = "[%s] %s" % (kw, title)
        if ch.get("msgtype") == "text":
            body = {"msgtype": "text", "text": {"content": fit("%s\n%s" % (title, text), 18000, True)}}
        else:
            md = "#### %s\n\n%s" % (defanged(title), defanged("  \n".join(x for x in text.split("\n") if x != "```")))
            body = {"msgtype": "markdown", "markdown": {"title": title, "text": fit(md, 18000, True)}}
        return Request(url, json_headers(), json_body(body))
