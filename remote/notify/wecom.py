"""``wecom``: a WeCom (企业微信) group robot, by URL or ``key``; markdown (4,096 bytes) or text (2,048)."""

from typing import Mapping

from .base import ChannelConfig, Request, register
from .http_client import RobotChannel, json_body, json_headers
from .render import defanged, fit


@register
class WeCom(RobotChannel):
    type = "wecom"
    required = (("url", "key"),)
    optional = ("msgtype",)
    secret_keys = ("url", "key")
    default_url = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send"
    token_key = "key"

    def request(self, ch: ChannelConfig, title: str, text: str, event: Mapping[str, object], now: float) -> Request:
        url = self.url(ch)
        if ch.get("msgtype") == "text":
            body = {"msgtype": "text", "text": {"content": fit("%s\n%s" % (title, text), 2048, True)}}
        else:
            md = "### %s\n%s" % (defanged(title), defanged(text.replace("```\n", "").replace("\n```", "")))
            body = {"msgtype": "markdown", "markdown": {"content": fit(md, 4096, True)}}
        return Request(url, json_headers(), json_body(body))
