"""``discord``: a webhook URL; 2,000 characters at most, an optional ``username``."""

from typing import Mapping

from remote.core.jsontypes import JSONObject

from .base import ChannelConfig, Request, register
from .http_client import HttpChannel, json_body, json_headers
from .render import discord_text, fit


@register
class Discord(HttpChannel):
    type = "discord"
    required = (("url",),)
    optional = ("username",)
    secret_keys = ("url",)

    def request(self, ch: ChannelConfig, title: str, text: str, event: Mapping[str, object], now: float) -> Request:
        body: JSONObject = {"content": fit("**%s**\n%s" % (discord_text(title), discord_text(text)), 2000),
                "allowed_mentions": {"parse": []}}  # a printed @everyone pings no one
        if ch.get("username"):
            body["username"] = ch["username"]
        return Request(ch["url"], json_headers(), json_body(body))
