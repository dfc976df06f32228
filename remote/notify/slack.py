"""``slack``: an incoming-webhook URL; the title in bold, 39,000 characters at most."""

from typing import Mapping

from .base import ChannelConfig, Request, register
from .http_client import HttpChannel, json_body, json_headers
from .render import fit, slack_text


@register
class Slack(HttpChannel):
    type = "slack"
    required = (("url",),)
    secret_keys = ("url",)

    def request(self, ch: ChannelConfig, title: str, text: str, event: Mapping[str, object], now: float) -> Request:
        body = {"text": fit("*%s*\n%s" % (slack_text(title), slack_text(text)), 39000)}
        return Request(ch["url"], json_headers(), json_body(body))
