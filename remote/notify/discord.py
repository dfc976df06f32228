"""``discord``: a webhook URL; 2,000 characters at most, an optional ``username``."""

from typing import Any, Dict

from .base import Request, register
from .http_client import HttpChannel, json_body, json_headers
from .render import discord_text, fit


@register
class Discord(HttpChannel):
    type = "discord"
    required = (("url",),)
    optional = ("username",)
    secret_keys = ("url",)

    def request(self, ch: Dict[str, Any], title: str, text: str, event: Dict[str, Any], now: float) -> Request:
        body = {"content": fit("**%s**\n%s" % (discord_text(title), discord_text(text)), 2000),
                "allowed_mentions": {"parse": []}}  # type: Dict[str, Any]  # a printed @everyone pings no one
        if ch.get("username"):
            body["username"] = ch["username"]
        return Request(ch["url"], json_headers(), json_body(body))
