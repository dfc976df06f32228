"""HTTP channels: the request a channel makes, the POST itself (urllib, no redirects), and what
an answer must say to count as delivered (an HTTP status, then the platform's own code)."""

import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple, Type, TypeVar

from remote.core.jsontypes import JSON, JSONObject

from .base import CHANNELS, Channel, ChannelConfig, ChannelError, Request, Transport, canonical, channel_type
from .redaction import resolve_channel

if TYPE_CHECKING:
    import http.client


def json_headers() -> Dict[str, str]:
    return {"Content-Type": "application/json; charset=utf-8"}


def json_body(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def add_query(url: str, params: Dict[str, str]) -> str:
    return url + ("&" if "?" in url else "?") + urllib.parse.urlencode(params)


class HttpChannel(Channel):
    """A channel that POSTs one request per message."""

    answers_json = False  # the platform answers {code, msg}: an HTTP 200 may still be a refusal

    def request(self, ch: ChannelConfig, title: str, text: str, event: Mapping[str, object], now: float) -> Request:
        """The request for one message (``ch`` resolved)."""
        raise NotImplementedError

    def answer(self, data: JSONObject) -> Tuple[JSON, JSON]:
        """(code, message) of the platform's JSON answer; code 0 means delivered."""
        return 0, None

    def deliver(self, channel: Mapping[str, object], resolved: ChannelConfig, title: str, text: str,
                event: Mapping[str, object], secrets: Optional[Dict[str, str]], timeout: float,
                transport: Transport) -> Optional[int]:
        req = build_request(channel, title, text, event, secrets)
        try:
            status, headers, body = transport(req, timeout)
        except Exception as e:
            raise ChannelError("%s: %s" % (type(e).__name__, e)) from e
        check_response(self.type, status, headers, body)
        return status


class RobotChannel(HttpChannel):
    """A group robot (WeCom, DingTalk): addressed by a token in its URL's query, sending markdown
    or, with ``msgtype: text``, plain text, and answering ``{errcode, errmsg}``."""

    default_url = ""
    token_key = ""  # the query parameter that carries the robot's token
    answers_json = True

    def validate(self, ch: Mapping[str, object], where: str) -> List[str]:
        if ch.get("msgtype") not in (None, "markdown", "text"):
            return ["%s.msgtype: must be 'markdown' or 'text'" % where]
        return []

    def url(self, ch: ChannelConfig) -> str:
        """``url`` (else the platform's), with the token added unless the URL carries it already."""
        url = ch.get("url") or self.default_url
        keys: Mapping[str, object] = ch  # token_key names one of ChannelConfig's strings
        if keys.get(self.token_key) and self.token_key + "=" not in url:
            url = add_query(url, {self.token_key: str(keys[self.token_key])})
        return url

    def answer(self, data: JSONObject) -> Tuple[JSON, JSON]:
        return data.get("errcode", 0), data.get("errmsg")


def build_request(channel: Mapping[str, object], title: str, text: str, event: Mapping[str, object],
                  secrets: Optional[Dict[str, str]] = None, now: Optional[float] = None) -> Request:
    """The HTTP request for one channel (``${NAME}`` resolved from ``secrets``); POST always."""
    ch, _, missing = resolve_channel(channel, secrets)
    if missing:
        raise ChannelError("secret ${%s} is not set" % missing[0], final=True)
    t = channel_type(ch)
    kind = CHANNELS.get(t)
    if not isinstance(kind, HttpChannel):
        raise ChannelError("channel type %r has no HTTP request" % t, final=True)
    return kind.request(ch, title, text, event, time.time() if now is None else now)


def check_response(channel_type_: str, status: int, headers: Dict[str, str], body: bytes) -> None:
    """Raise :class:`ChannelError` unless the response means delivered (HTTP and platform code)."""
    text = body[:2000].decode("utf-8", "replace")
    if status == 429 or status >= 500:
        ra = None
        for k, v in (headers or {}).items():
            if k.lower() == "retry-after":
                try:
                    ra = float(v)
                except ValueError:
                    ra = None
        raise ChannelError("HTTP %d: %s" % (status, text[:200]), status=status, retry_after=ra)
    if not 200 <= status < 300:
        raise ChannelError("HTTP %d: %s" % (status, text[:200]), final=True, status=status)
    t = canonical(channel_type_)
    kind = CHANNELS.get(t)
    if not (isinstance(kind, HttpChannel) and kind.answers_json):
        return
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ChannelError("HTTP %d but the answer is not JSON: %s" % (status, text[:200]), final=True, status=status)
    code, msg = kind.answer(data)
    if code not in (0, "0"):
        raise ChannelError("refused by %s: code %s: %s" % (t, code, msg), final=True, status=status)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer (3xx, final), never a silent re-send as GET."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[override]
        return None


WHOLE_ANSWER = 3.0  # a whole answer within this many timeouts: one that trickles a byte at a time ends too


def within(fn: Callable[[], Any], limit: float, on_expire: Callable[[], None] = lambda: None) -> Any:
    """``fn()``, run in a thread and given up on after ``limit`` s: ``on_expire`` (which should end what
    ``fn`` waits on), then ``socket.timeout``. A server that answers a byte every few seconds never
    trips a socket's per-read timeout; this bounds the whole exchange."""
    value = []  # type: List[Any]  # fn's answer, once it came
    error = []  # type: List[BaseException]

    def work() -> None:
        try:
            value.append(fn())
        except BaseException as e:  # handed to the caller
            error.append(e)

    t = threading.Thread(target=work, name="gpujob-notify-post", daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        on_expire()
        t.join(5.0)
        raise socket.timeout("no whole answer within {:.0f} s".format(limit))
    if error:
        raise error[0]
    return value[0]


_Conn = TypeVar("_Conn", bound="http.client.HTTPConnection")


def _tracked(base: Type[_Conn], socks: List[Any]) -> Type[_Conn]:
    """``base`` (HTTPConnection or HTTPSConnection) that keeps its socket in ``socks`` (to be shut down)."""

    class Tracked(base):  # type: ignore[valid-type,misc]
        def connect(self) -> None:
            super().connect()
            socks.append(self.sock)

    return Tracked


def _opener(socks: List[Any]) -> Any:
    """urllib with the environment's proxy settings, no redirects, and its sockets kept in ``socks``."""
    import http.client

    class Http(urllib.request.HTTPHandler):
        def http_open(self, req: Any) -> Any:
            return self.do_open(_tracked(http.client.HTTPConnection, socks), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req: Any) -> Any:
            # (typeshed leaves out _context, which HTTPSHandler.__init__ sets)
            return self.do_open(_tracked(http.client.HTTPSConnection, socks), req, context=self._context)  # type: ignore[attr-defined]

    return urllib.request.build_opener(_NoRedirect, Http, Https)


def urllib_transport(req: Request, timeout: float) -> Tuple[int, Dict[str, str], bytes]:
    """POST with urllib: (status, headers, body) for any HTTP answer; raises on network errors, and when
    the whole answer takes more than ``WHOLE_ANSWER`` timeouts (its connection is then shut down)."""
    r = urllib.request.Request(req.url, data=req.body, headers=dict(req.headers, **{"User-Agent": "gpujob-agent"}),
                               method="POST")
    socks = []  # type: List[Any]

    def post() -> Tuple[int, Dict[str, str], bytes]:
        try:
            with _opener(socks).open(r, timeout=timeout) as resp:
                return resp.status, dict(resp.headers.items()), resp.read(65536)
        except urllib.error.HTTPError as e:
            try:
                body = e.read(65536)
            except Exception:
                body = b""
            return e.code, dict(e.headers.items()) if e.headers else {}, body

    def cut() -> None:
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    return within(post, timeout * WHOLE_ANSWER, cut)

