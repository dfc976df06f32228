"""``wecom``: a WeCom (企业微信) group robot, by URL or ``key``; markdown (4,096 bytes) or text (2,048)."""

from typing import Any, Dict, List, Tuple

from .base import Request, register
from .http_client import HttpChannel, add_query, check_msgtype, json_body, json_headers
from .render import fit


@register
class WeCom(HttpChannel):
    type = "wecom"
    required = (("url", "key"),)
    optional = ("msgtype",)
    secret_keys = ("url", "key")
    answers_json = True

    def validate(self, ch: Dict[str, Any], where: str) -> List[str]:
        return check_msgtype(ch, where)

    def request(self, ch: Dict[str, Any], title: str, text: str, event: Dict[str, Any], now: float) -> Request:
        url = ch.get("url") or "https://qyapi.weixin.qq.com/cgi-bin/webhook/send"
        if ch.get("key") and "key=" not in url:
            url = add_query(url, {"key": ch["key"]})
        if ch.get("msgtype") == "text":
            body = {"msgtype": "text", "text": {"content": fit("%s\n%s" % (title, text), 2048, True)}}
        else:
            md = "### %s\n%s" % (title, text.replace("```\n", "").replace("\n```", ""))
            body = {"msgtype": "markdown", "markdown": {"content": fit(md, 4096, True)}}
        return Request(url, json_headers(), json_body(body))

    def answer(self, data: Dict[str, Any]) -> Tuple[Any, Any]:
        return data.get("errcode", 0), data.get("errmsg")
