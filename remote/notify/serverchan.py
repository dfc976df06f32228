"""``serverchan``: ServerChan (Server酱) by ``sendkey`` (Turbo or ServerChan3) or ``url``; a form POST."""

import re
import urllib.parse
from typing import Mapping, Tuple

from remote.core.jsontypes import JSON, JSONObject

from .base import ChannelConfig, Request, register
from .http_client import HttpChannel
from .render import fit


def serverchan_url(sendkey: str) -> str:
    """ServerChan Turbo (``SCT...``) or ServerChan3 (``sctp<uid>t...``) endpoint for a SendKey."""
    m = re.match(r"^sctp(\d+)t", sendkey)
    if m:
        return "https://%s.push.ft07.com/send/%s.send" % (m.group(1), sendkey)
    return "https://sctapi.ftqq.com/%s.send" % sendkey


@register
class ServerChan(HttpChannel):
    type = "serverchan"
    required = (("sendkey", "url"),)
    optional = ("sendkey", "url")
    secret_keys = ("sendkey",)
    answers_json = True

    def request(self, ch: ChannelConfig, title: str, text: str, event: Mapping[str, object], now: float) -> Request:
        url = ch.get("url") or serverchan_url(ch["sendkey"])
        form = urllib.parse.urlencode({"title": fit(title, 32), "desp": fit(text, 30000)}).encode("ascii")
        return Request(url, {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}, form)

    def answer(self, data: JSONObject) -> Tuple[JSON, JSON]:
        return data.get("code", 0), data.get("message")
