"""Notification channels against a real local HTTP server and a real SMTP server (no internet)."""

from __future__ import annotations

import ast
import base64
import hashlib
import hmac
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
from email import message_from_bytes
from email.policy import default as default_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpujob.bundle import import_remote, remote_dir

notify = import_remote("notify")

SECRETS = {
    "SLACK_WEBHOOK": "",  # filled with the server's URL per test
    "DISCORD_TOKEN": "discordTOKENzz9f8e7d6c",
    "WECOM_KEY": "wecom-key-693a91f6-7xxx",
    "DT_TOKEN": "dingtalkACCESStoken55aa",
    "DT_SECRET": "SECdingtalkSIGNsecret0001",
    "FEISHU_HOOK": "feishuHOOKid-1234abcd",
    "FEISHU_SECRET": "feishuSIGNsecret-xyz",
    "SC_KEY": "SCT12345TsendkeyABCDEF",
    "AUTODL_TOKEN": "autodlDEVtoken.eyJhbGciOi",
    "HOOK_SECRET": "generic-hmac-secret-777",
    "SMTP_PASSWORD": "smtpPa55word!zz",
}


# ----------------------------------------------------------------------------- local servers


class Recorder:
    """A real HTTP server on 127.0.0.1; records requests, answers from a per-path script."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.script: dict[str, list[tuple]] = {}
        rec = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                u = urllib.parse.urlsplit(self.path)
                rec.requests.append(
                    {"path": u.path, "query": u.query, "headers": dict(self.headers.items()), "body": body,
                     "raw_path": self.path}
                )
                steps = next((v for k, v in rec.script.items() if u.path.startswith(k)), [(200, b"ok")])
                step = steps.pop(0) if len(steps) > 1 else steps[0]
                status, payload = step[0], step[1]
                extra = step[2] if len(step) > 2 else {}
                if extra.get("sleep"):
                    time.sleep(extra["sleep"])
                if callable(payload):
                    payload = payload(self)
                try:
                    self.send_response(status)
                    for k, v in extra.get("headers", {}).items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass

            def log_message(self, *a) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def on(self, path: str, *steps: tuple) -> None:
        self.script[path] = list(steps)

    def last(self, prefix: str) -> dict:
        return [r for r in self.requests if r["path"].startswith(prefix)][-1]

    def count(self, prefix: str) -> int:
        return sum(1 for r in self.requests if r["path"].startswith(prefix))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def srv():
    r = Recorder()
    yield r
    r.close()


@pytest.fixture
def secrets(srv):
    s = dict(SECRETS)
    s["SLACK_WEBHOOK"] = f"{srv.base}/services/T0001/B0002/slackSECRETpath99"
    return s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _all_channels(srv: Recorder) -> list[dict]:
    b = srv.base
    return [
        {"type": "slack", "url": "${SLACK_WEBHOOK}"},
        {"type": "discord", "url": b + "/api/webhooks/42/${DISCORD_TOKEN}", "username": "gpujob"},
        {"type": "wecom", "url": b + "/cgi-bin/webhook/send", "key": "${WECOM_KEY}"},
        {"type": "dingtalk", "url": b + "/robot/send?access_token=${DT_TOKEN}", "secret": "${DT_SECRET}",
         "keyword": "gpujob"},
        {"type": "lark", "url": b + "/open-apis/bot/v2/hook/${FEISHU_HOOK}", "secret": "${FEISHU_SECRET}"},
        {"type": "serverchan", "sendkey": "${SC_KEY}", "url": b + "/${SC_KEY}.send"},
        {"type": "autodl", "token": "${AUTODL_TOKEN}", "url": b + "/api/v1/wechat/message/send"},
        {"type": "webhook", "url": b + "/hook", "secret": "${HOOK_SECRET}", "headers": {"X-Team": "ml"}},
    ]


def _script_ok(srv: Recorder) -> None:
    srv.on("/services/", (200, b"ok"))
    srv.on("/api/webhooks/", (204, b""))
    srv.on("/cgi-bin/webhook/send", (200, b'{"errcode":0,"errmsg":"ok"}'))
    srv.on("/robot/send", (200, b'{"errcode":0,"errmsg":"ok"}'))
    srv.on("/open-apis/", (200, b'{"code":0,"msg":"success","data":{}}'))
    srv.on("/SCT", (200, b'{"code":0,"message":"","data":{}}'))
    srv.on("/api/v1/wechat/", (200, b'{"code":"Success","msg":""}'))
    srv.on("/hook", (200, b"{}"))


FAILED = {
    "event": "failed",
    "job_id": "j-20240101-abcd",
    "name": "bert-ft",
    "host": "autodl-west-7",
    "duration_s": 3723.4,
    "cost": 4.56,
    "currency": "CNY",
    "metrics": {"step": 1200, "loss": 0.123456, "lr": 2e-05},
    "reason": "exit code 1",
    "diagnosis": "CUDA out of memory",
    "remedy": "lower batch_size",
    "log_tail": [f"line {i}" for i in range(25)],
    "tb_url": "https://u1-6006.westc.gpuhub.com:8443/",
}


# ----------------------------------------------------------------------------- structure


def test_remote_package_is_stdlib_only_and_py38_syntax():
    """Standard library, the package's own modules, and of the rest of remote/ only protocol and
    atomicfile (the rate limit's state file is shared by every supervisor)."""
    files = sorted((remote_dir() / "notify").glob("*.py"))
    assert len(files) > 10
    mods, local = set(), set()
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), feature_version=(3, 8))):
            if isinstance(node, ast.Import):
                mods.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] == "remote":
                local.update(node.module + "." + a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                mods.add(node.module.split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                local.add("." * node.level + (node.module or ",".join(a.name for a in node.names)))
    assert mods <= set(sys.stdlib_module_names), mods - set(sys.stdlib_module_names)
    assert "__future__" not in mods
    typed = {m for m in local if m.startswith("remote.core.jsontypes.")}  # the JSON type names, nothing run
    assert {m for m in local - typed if not m.startswith(".")} == {"remote.core.protocol", "remote.core.atomicfile"}, local
    assert not {m for m in local if m.startswith("..")}, local


def test_every_channel_kind_is_registered_once_with_its_aliases():
    kinds = notify.CHANNELS
    assert sorted(kinds) == ["autodl", "dingtalk", "discord", "email", "feishu", "serverchan", "slack", "webhook",
                             "wecom"]
    for alias, canonical in (("lark", "feishu"), ("smtp", "email"), ("generic", "webhook"), ("wechat", "autodl"),
                             ("autodl_wechat", "autodl"), (" Slack ", "slack")):
        assert notify.channel_type({"type": alias}) == canonical
    assert all(k.type == name for name, k in kinds.items())


def test_render_failed_event():
    title, text = notify.render(FAILED)
    assert "bert-ft" in title and "failed" in title and "gpujob" in title
    for s in ("j-20240101-abcd", "autodl-west-7", "1h 02m", "4.56 CNY", "CUDA out of memory", "lower batch_size",
              "loss=0.1235", "step=1200", "https://u1-6006.westc.gpuhub.com:8443/", "line 24"):
        assert s in text, s
    assert "line 4\n" not in text and "line 5" in text  # last 20 lines only


def test_validate_channels(srv, secrets):
    good = {"on": ["failed", "succeeded"], "channels": _all_channels(srv) + [
        {"type": "email", "host": "smtp.x.org", "port": 587, "starttls": True, "user": "me@x.org",
         "password": "${SMTP_PASSWORD}", "to": ["me@x.org"]}]}
    assert notify.validate_channels(good, secrets) == []
    assert notify.validate_channels(None) == []
    bad = {"on": ["finished"], "extra": 1, "channels": [
        {"type": "slack"},
        {"type": "pigeon", "url": "x"},
        {"type": "discord", "url": "ftp://x", "colour": "red"},
        {"type": "email", "host": "h", "to": "nobody", "port": 99999, "password": "literalPASSWORD1"},
        {"type": "dingtalk", "url": "${MISSING_ONE}", "secret": "literalDTsecret9"},
    ]}
    errs = notify.validate_channels(bad, secrets)
    joined = "\n".join(errs)
    for frag in ("notify.extra", "notify.on: 'finished'", "channels[0] (slack).url: required",
                 "channels[1].type: 'pigeon'", "channels[2] (discord).url: must start with",
                 "channels[2] (discord).colour: unknown key", "channels[3] (email).to", "channels[3] (email).port",
                 "channels[3] (email).user: required", "${MISSING_ONE} is not set"):
        assert frag in joined, (frag, joined)
    assert "literalPASSWORD1" not in joined and "literalDTsecret9" not in joined


def test_secret_names_and_externalize():
    cfg = {"channels": [{"type": "slack", "url": "https://hooks.slack.com/services/T/B/literalXYZ123"},
                        {"type": "dingtalk", "url": "https://oapi.dingtalk.com/robot/send?access_token=${DT}",
                         "secret": "${DT_SECRET}"},
                        {"type": "webhook", "url": "https://x.org/h", "headers": {"Authorization": "Bearer abc12345"}}]}
    assert notify.secret_names(cfg) == ["DT", "DT_SECRET"]
    out, found = notify.externalize_secrets(cfg)
    assert out["channels"][0]["url"] == "${GPUJOB_NOTIFY_0_URL}"
    assert found["GPUJOB_NOTIFY_0_URL"].endswith("literalXYZ123")
    assert out["channels"][1] == cfg["channels"][1]
    assert out["channels"][2]["headers"]["Authorization"] == "${GPUJOB_NOTIFY_2_HEADERS_AUTHORIZATION}"
    assert "literalXYZ123" not in json.dumps(out) and "abc12345" not in json.dumps(out)
    merged = dict(found, DT="t0ken1", DT_SECRET="s3cret1")
    assert notify.validate_channels(out, merged) == []


def test_redact():
    secrets = {"A": "tokenVALUE123", "URL": "https://hooks.slack.com/services/T1/B2/pathSECRET456", "S": "ab"}
    text = ("error at https://hooks.slack.com/services/T1/B2/pathSECRET456: 404 for tokenVALUE123; "
            "quoted token%2Bx? " + "/services/T1/B2/pathSECRET456?x=1 and pathSECRET456 alone, ab stays")
    r = notify.redact(text, secrets)
    assert "tokenVALUE123" not in r and "pathSECRET456" not in r
    assert "https://hooks.slack.com/***" in r
    assert "ab stays" in r  # too short to hunt for
    assert notify.redact("k=a%2Bb%2Fc%3D", ["a+b/c="]) == "k=***"
    assert notify.redact(None, {}) == ""
    # pieces of a secret URL that are plain words are not hunted for in the message text
    url = "https://hooks.slack.com/services/T0001ABCD/B0002EFGH/abcdefghijklmnopqrstuvwx"
    r = notify.redact("services and webhooks; got B0002EFGH and abcdefghijklmnopqrstuvwx", [url])
    assert r == "services and webhooks; got *** and ***"


# ----------------------------------------------------------------------------- each channel's request


def test_every_channel_body_and_signature(srv, secrets, tmp_path):
    _script_ok(srv)
    chans = _all_channels(srv)
    t0 = time.time()
    outs = notify.send_all(chans, FAILED, secrets, str(tmp_path), retries=1, backoff=0.01, timeout=5)
    assert [o["ok"] for o in outs] == [True] * len(chans), outs
    assert [o["channel"] for o in outs] == ["slack", "discord", "wecom", "dingtalk", "feishu", "serverchan",
                                            "autodl", "webhook"]
    title, text = notify.render(FAILED)

    r = srv.last("/services/")
    assert r["path"] == "/services/T0001/B0002/slackSECRETpath99"
    body = json.loads(r["body"])
    assert set(body) == {"text"} and title in body["text"] and "CUDA out of memory" in body["text"]
    assert r["headers"]["Content-Type"].startswith("application/json")

    r = srv.last("/api/webhooks/")
    body = json.loads(r["body"])
    assert r["path"] == "/api/webhooks/42/" + SECRETS["DISCORD_TOKEN"]
    assert body["username"] == "gpujob" and title in body["content"] and len(body["content"]) <= 2000

    r = srv.last("/cgi-bin/webhook/send")
    assert urllib.parse.parse_qs(r["query"]) == {"key": [SECRETS["WECOM_KEY"]]}
    body = json.loads(r["body"])
    assert body["msgtype"] == "markdown" and "CUDA out of memory" in body["markdown"]["content"]
    assert len(body["markdown"]["content"].encode()) <= 4096

    # DingTalk: sign = urlencode(base64(HmacSHA256(secret, f"{timestamp}\n{secret}"))), timestamp in ms
    r = srv.last("/robot/send")
    assert "sign=" in r["query"]
    q = urllib.parse.parse_qs(r["query"])
    ts = q["timestamp"][0]
    assert abs(int(ts) / 1000 - t0) < 60
    sec = SECRETS["DT_SECRET"]
    expect = base64.b64encode(hmac.new(sec.encode(), f"{ts}\n{sec}".encode(), hashlib.sha256).digest()).decode()
    assert q["sign"] == [expect] and q["access_token"] == [SECRETS["DT_TOKEN"]]
    raw_sign = r["query"].split("sign=")[1].split("&")[0]
    assert raw_sign == urllib.parse.quote_plus(expect)  # sent URL-encoded, as documented
    body = json.loads(r["body"])
    assert body["msgtype"] == "markdown" and body["markdown"]["title"] == title
    assert "gpujob" in body["markdown"]["text"] and "CUDA out of memory" in body["markdown"]["text"]

    # Feishu/Lark: body timestamp (s) + sign = base64(HmacSHA256(key=f"{timestamp}\n{secret}", msg=""))
    r = srv.last("/open-apis/")
    assert r["path"] == "/open-apis/bot/v2/hook/" + SECRETS["FEISHU_HOOK"]
    body = json.loads(r["body"])
    ts = body["timestamp"]
    assert isinstance(ts, str) and abs(int(ts) - t0) < 60
    key = f"{ts}\n{SECRETS['FEISHU_SECRET']}".encode()
    assert body["sign"] == base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
    assert body["msg_type"] == "text" and "CUDA out of memory" in body["content"]["text"]

    r = srv.last("/SCT")
    assert r["path"] == f"/{SECRETS['SC_KEY']}.send"
    assert r["headers"]["Content-Type"].startswith("application/x-www-form-urlencoded")
    form = urllib.parse.parse_qs(r["body"].decode())
    assert set(form) == {"title", "desp"} and "bert-ft" in form["title"][0] and "line 24" in form["desp"][0]

    r = srv.last("/api/v1/wechat/")
    assert r["headers"]["Authorization"] == SECRETS["AUTODL_TOKEN"]  # raw, no "Bearer"
    body = json.loads(r["body"])
    assert set(body) == {"title", "name", "content"} and body["name"] == "bert-ft" and body["title"] == title

    r = srv.last("/hook")
    sig = hmac.new(SECRETS["HOOK_SECRET"].encode(), r["body"], hashlib.sha256).hexdigest()
    assert r["headers"]["X-Gpujob-Signature"] == "sha256=" + sig
    body = json.loads(r["body"])
    assert r["headers"]["X-Gpujob-Timestamp"] == str(body["timestamp"])
    assert r["headers"]["X-Team"] == "ml" and r["headers"]["X-Gpujob-Event"] == "failed"
    assert body["event"] == "failed" and body["job_id"] == "j-20240101-abcd" and len(body["log_tail"]) == 25
    assert body["metrics"]["step"] == 1200 and body["title"] == title

    blob = json.dumps(outs)
    for v in secrets.values():
        assert v not in blob


def test_build_request_deterministic_and_limits(srv, secrets):
    now = 1_700_000_000.5
    ch = {"type": "dingtalk", "url": "https://oapi.dingtalk.com/robot/send?access_token=T", "secret": "SECabc",
          "msgtype": "text"}
    req = notify.build_request(ch, "t", "x", {}, {}, now)
    assert "timestamp=1700000000500&sign=" + notify.dingtalk_sign("SECabc", 1700000000500) in req.url
    assert json.loads(req.body) == {"msgtype": "text", "text": {"content": "t\nx"}}
    req = notify.build_request({"type": "feishu", "url": "https://f/h", "secret": "s"}, "t", "x", {}, {}, now)
    assert json.loads(req.body)["timestamp"] == "1700000000"
    big = "汉字" * 5000 + "\nTHE-END"
    req = notify.build_request({"type": "wecom", "key": "k"}, "t", big, {}, {}, now)
    assert req.url == "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k"
    content = json.loads(req.body)["markdown"]["content"]
    assert len(content.encode()) <= 4096 and content.endswith("THE-END") and "truncated" in content
    req = notify.build_request({"type": "discord", "url": "https://d/x"}, "t", "a" * 5000, {}, {}, now)
    assert len(json.loads(req.body)["content"]) <= 2000
    assert notify.build_request({"type": "serverchan", "sendkey": "sctp123tABC"}, "t", "x", {}, {}).url == \
        "https://123.push.ft07.com/send/sctp123tABC.send"
    assert notify.build_request({"type": "serverchan", "sendkey": "SCTkey"}, "t", "x", {}, {}).url == \
        "https://sctapi.ftqq.com/SCTkey.send"
    req = notify.build_request({"type": "autodl", "token": "tok"}, "t", "x", {"job_id": "j1"}, {})
    assert req.url == notify.AUTODL_URL and req.headers["Authorization"] == "tok"


# ----------------------------------------------------------------------------- retries and failures


def test_500_then_200_is_retried(srv):
    srv.on("/flaky", (500, b"oops"), (503, b"busy"), (200, b"ok"))
    srv.on("/limited", (429, b"slow down", {"headers": {"Retry-After": "0"}}), (200, b"ok"))
    chans = [{"type": "slack", "url": srv.base + "/flaky"}, {"type": "webhook", "url": srv.base + "/limited"}]
    outs = notify.send_all(chans, FAILED, {}, None, retries=3, backoff=0.01, timeout=2)
    assert outs[0]["ok"] and outs[0]["attempts"] == 3 and srv.count("/flaky") == 3
    assert outs[1]["ok"] and outs[1]["attempts"] == 2


def test_500_forever_timeout_refused_are_given_up_in_bounded_time(srv):
    srv.on("/down", (500, b"down"))
    srv.on("/slow", (200, b"ok", {"sleep": 1.5}))
    srv.on("/gone", (404, b"no such hook"))
    srv.on("/moved", (302, b"", {"headers": {"Location": srv.base + "/elsewhere"}}))
    srv.on("/robot", (200, b'{"errcode":310000,"errmsg":"keywords not in content"}'))
    closed = f"http://127.0.0.1:{_free_port()}/nothing"
    chans = [{"type": "slack", "url": srv.base + "/down"}, {"type": "discord", "url": srv.base + "/slow"},
             {"type": "slack", "url": srv.base + "/gone"}, {"type": "dingtalk", "url": srv.base + "/robot"},
             {"type": "webhook", "url": closed}, {"type": "webhook", "url": srv.base + "/moved"}]
    t0 = time.monotonic()
    outs = notify.send_all(chans, FAILED, {}, None, retries=2, backoff=0.02, timeout=0.3)
    took = time.monotonic() - t0
    assert [o["ok"] for o in outs] == [False] * 6
    assert outs[5]["attempts"] == 1 and outs[5]["status"] == 302 and srv.count("/elsewhere") == 0
    assert outs[0]["attempts"] == 3 and outs[0]["status"] == 500 and srv.count("/down") == 3
    assert outs[1]["attempts"] == 3 and "timed out" in outs[1]["error"].lower()
    assert outs[2]["attempts"] == 1 and outs[2]["status"] == 404  # 4xx is final
    assert outs[3]["attempts"] == 1 and "310000" in outs[3]["error"]  # platform refusal is final
    assert outs[4]["attempts"] == 3 and outs[4]["status"] is None
    assert took < 6, took
    assert [o["channel"] for o in outs] == ["slack[0]", "discord", "slack[2]", "dingtalk", "webhook[4]", "webhook[5]"]


def test_send_all_never_raises():
    bad = [{"type": "slack"}, "not a dict", {"type": "nope"}, {"type": "email", "host": None, "to": None}]
    outs = notify.send_all(bad, {"event": "failed"}, None, None, retries=0, timeout=0.2)
    assert len(outs) == 4 and not any(o["ok"] for o in outs)
    assert notify.send_all([], {}, None) == []
    assert notify.notify_event(None, {"event": "failed"}, {}) == []
    assert notify.notify_event({"channels": "garbage"}, {"event": "failed"}, {}) == []


def test_on_filter(srv):
    srv.on("/a", (200, b"ok"))
    cfg = {"channels": [{"type": "slack", "url": srv.base + "/a"},
                        {"type": "slack", "url": srv.base + "/a", "name": "loud", "on": ["started", "failed"]}]}
    assert notify.notify_event(cfg, {"event": "started"}, {}) != []
    assert [o["channel"] for o in notify.notify_event(cfg, {"event": "started"}, {})] == ["loud"]
    assert len(notify.notify_event(cfg, {"event": "failed"}, {})) == 2
    assert notify.notify_event({"on": ["lost"], **cfg}, {"event": "succeeded"}, {}) == []
    lines: list[str] = []
    notify.notify_event(cfg, {"event": "succeeded"}, {}, log=lines.append)
    assert lines == ["notify slack[0] (succeeded): delivered (1 attempt)"]


# ----------------------------------------------------------------------------- AutoDL rate limit


def test_autodl_rate_limit_5_a_minute_and_50_a_day(srv, tmp_path):
    srv.on("/wx", (200, b'{"code":"Success"}'))
    cfg = {"on": ["failed"], "channels": [{"type": "autodl", "token": "${AUTODL_TOKEN}", "url": srv.base + "/wx"}]}
    outs = [notify.notify_event(cfg, FAILED, SECRETS, str(tmp_path), retries=0)[0] for _ in range(6)]
    assert [o["ok"] for o in outs] == [True] * 5 + [False]
    assert outs[5]["skipped"] and "rate-limited" in outs[5]["error"] and outs[5]["attempts"] == 0
    assert srv.count("/wx") == 5
    state = tmp_path / "notify_autodl_rate.json"
    assert state.stat().st_mode & 0o777 == 0o600
    assert SECRETS["AUTODL_TOKEN"] not in state.read_text()
    # a fresh process reads the state: still limited; a full day of older sends blocks too
    assert notify.notify_event(cfg, FAILED, SECRETS, str(tmp_path), retries=0)[0]["skipped"]
    key = next(iter(json.loads(state.read_text())))
    now = time.time()
    state.write_text(json.dumps({key: [now - 120 - i * 1000 for i in range(50)]}))
    o = notify.notify_event(cfg, FAILED, SECRETS, str(tmp_path), retries=0)[0]
    assert o["skipped"] and "a day" in o["error"]
    state.write_text("garbage")  # corrupt state never blocks
    assert notify.notify_event(cfg, FAILED, SECRETS, str(tmp_path), retries=0)[0]["ok"]
    srv.on("/wx", (200, b'{"code":"AuthorizationFailed","msg":"bad token"}'))
    state.unlink()
    o = notify.notify_event(cfg, FAILED, SECRETS, str(tmp_path), retries=2)[0]
    assert not o["ok"] and o["attempts"] == 1 and "AuthorizationFailed" in o["error"]


# ----------------------------------------------------------------------------- secrets never leak


def test_no_secret_in_outcomes_logs_or_messages(srv, secrets, tmp_path):
    def echo(h):  # a hostile endpoint echoing everything it got
        return f"bad request {h.path} auth={h.headers.get('Authorization')}".encode()

    for p in ("/services/", "/api/webhooks/", "/cgi-bin/", "/robot/", "/open-apis/", "/SCT", "/api/v1/wechat/",
              "/hook"):
        srv.on(p, (400, echo))
    chans = _all_channels(srv) + [{"type": "dingtalk", "url": srv.base + "/robot/x?access_token=literalTOKEN0042"}]
    ev = dict(FAILED, log_tail=["export HF=" + secrets["DT_SECRET"], "url " + secrets["SLACK_WEBHOOK"]],
              reason="boom " + secrets["SMTP_PASSWORD"])
    lines: list[str] = []
    outs = notify.send_all(chans, ev, secrets, str(tmp_path), retries=0, timeout=2, log=lines.append)
    assert not any(o["ok"] for o in outs) and all(o["status"] == 400 for o in outs)
    assert all("bad request" in o["error"] for o in outs)
    blob = json.dumps(outs) + "\n".join(lines)
    for v in list(secrets.values()) + ["literalTOKEN0042", "slackSECRETpath99"]:
        assert v not in blob, v
    # the messages themselves: the log tail's secret was redacted before sending
    for r in srv.requests:
        body = r["body"].decode()
        for v in (secrets["DT_SECRET"], secrets["SMTP_PASSWORD"], "slackSECRETpath99"):
            assert v not in body and urllib.parse.quote_plus(v) not in body, (r["path"], v)
        assert "***" in urllib.parse.unquote_plus(body)


def test_missing_secret_is_reported_by_name(srv):
    outs = notify.send_all([{"type": "slack", "url": "${NOPE_URL}"}], FAILED, {}, None)
    assert outs[0]["error"] == "secret ${NOPE_URL} is not set" and outs[0]["attempts"] == 0
    assert srv.requests == []


# ----------------------------------------------------------------------------- e-mail


class _Handler:
    def __init__(self) -> None:
        self.messages: list[tuple] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content,
                              getattr(session, "authenticated", None)))
        return "250 OK"


@pytest.fixture
def smtpd():
    aiosmtpd = pytest.importorskip("aiosmtpd")
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult, LoginPassword

    assert aiosmtpd

    def auth(server, session, envelope, mechanism, auth_data):
        ok = isinstance(auth_data, LoginPassword) and auth_data.login == b"me@x.org" and \
            auth_data.password == SECRETS["SMTP_PASSWORD"].encode()
        return AuthResult(success=ok, handled=False)

    handler = _Handler()
    ctl = Controller(handler, hostname="127.0.0.1", port=_free_port(), authenticator=auth,
                     auth_require_tls=False, auth_required=False)
    ctl.start()
    ctl.handler_ = handler
    yield ctl
    ctl.stop()


def test_email_with_login(smtpd, tmp_path):
    ch = {"type": "email", "host": "127.0.0.1", "port": smtpd.port, "starttls": False, "user": "me@x.org",
          "password": "${SMTP_PASSWORD}", "to": ["a@x.org", "b@x.org"], "from": "gpujob@x.org"}
    assert notify.validate_channels({"channels": [ch]}, SECRETS) == []
    outs = notify.send_all([ch], FAILED, SECRETS, str(tmp_path), retries=0, timeout=5)
    assert outs[0]["ok"], outs
    (frm, rcpts, content, authed), = smtpd.handler_.messages
    assert frm == "gpujob@x.org" and rcpts == ["a@x.org", "b@x.org"] and authed
    msg = message_from_bytes(content, policy=default_policy)
    assert "bert-ft" in msg["Subject"] and "failed" in msg["Subject"]
    assert msg["To"] == "a@x.org, b@x.org"
    assert "CUDA out of memory" in msg.get_content() and "line 24" in msg.get_content()


def test_email_bad_password_plain_refusal_and_no_login(smtpd):
    ch = {"type": "email", "host": "127.0.0.1", "port": smtpd.port, "starttls": False, "user": "me@x.org",
          "password": "wrongPASSWORD-123", "to": "a@x.org"}
    o = notify.send_all([ch], FAILED, {}, None, retries=3, backoff=0.01, timeout=5)[0]
    assert not o["ok"] and o["attempts"] == 1 and "login refused" in o["error"]
    assert "wrongPASSWORD-123" not in json.dumps(o)
    # starttls auto (the default) on a server without STARTTLS: no password in clear
    o = notify.send_all([dict(ch, starttls="auto")], FAILED, {}, None, retries=3, timeout=5)[0]
    assert not o["ok"] and o["attempts"] == 1 and "in clear" in o["error"]
    o = notify.send_all([dict(ch, starttls=True)], FAILED, {}, None, retries=3, timeout=5)[0]
    assert not o["ok"] and "STARTTLS" in o["error"]
    assert smtpd.handler_.messages == []
    o = notify.send_all([{"type": "email", "host": "127.0.0.1", "port": smtpd.port, "to": "a@x.org"}],
                        {"event": "succeeded", "job_id": "j1"}, {}, None, retries=0, timeout=5)[0]
    assert o["ok"] and len(smtpd.handler_.messages) == 1


def test_email_server_down_is_retried_and_given_up():
    ch = {"type": "email", "host": "127.0.0.1", "port": _free_port(), "to": "a@x.org"}
    t0 = time.monotonic()
    o = notify.send_all([ch], FAILED, {}, None, retries=2, backoff=0.01, timeout=1)[0]
    assert not o["ok"] and o["attempts"] == 3 and "connect" in o["error"] and time.monotonic() - t0 < 5


# ----------------------------------------------------------------------------- laptop side


def test_notify_test_via_httpx(srv, secrets, tmp_path, smtpd):
    from gpujob.ui.report import format_outcomes
    from gpujob.usecases.notify import send as nt

    _script_ok(srv)
    cfg = {"on": ["failed"], "channels": _all_channels(srv) + [
        {"type": "slack", "url": "${NOT_SET_ANYWHERE}", "name": "broken"},
        {"type": "email", "host": "127.0.0.1", "port": smtpd.port, "starttls": False, "user": "me@x.org",
         "password": "${SMTP_PASSWORD}", "to": "a@x.org"}]}
    outs = nt.notify_test(cfg, secrets, job_name="demo", state_dir=tmp_path)
    assert [o["ok"] for o in outs] == [True] * 8 + [False, True], outs
    assert outs[8]["channel"] == "broken" and "${NOT_SET_ANYWHERE} is not set" in outs[8]["error"]
    assert srv.count("/") == 8 and srv.last("/services/")["headers"]["User-Agent"] == "gpujob"
    assert "test notification" in json.loads(srv.last("/hook")["body"])["title"]
    assert json.loads(srv.last("/hook")["body"])["event"] == "test"
    assert len(smtpd.handler_.messages) == 1
    lines = format_outcomes(outs)
    assert lines[0] == "notify slack[0] (test): delivered (1 attempt)"
    blob = json.dumps(outs) + "\n".join(lines)
    for v in secrets.values():
        assert v not in blob


def test_notify_test_retries_and_failures_via_httpx(srv):
    from gpujob.usecases.notify import send as nt

    srv.on("/flaky", (500, b"x"), (200, b"ok"))
    srv.on("/slow", (200, b"ok", {"sleep": 1.5}))
    cfg = {"channels": [{"type": "slack", "url": srv.base + "/flaky"}, {"type": "slack", "url": srv.base + "/slow"}]}
    t0 = time.monotonic()
    outs = nt.notify_test(cfg, {}, retries=1, backoff=0.01, timeout=0.3, state_dir=None)
    assert outs[0]["ok"] and outs[0]["attempts"] == 2
    assert not outs[1]["ok"] and outs[1]["attempts"] == 2 and "Timeout" in outs[1]["error"]
    assert time.monotonic() - t0 < 4


def test_secrets_from_env(tmp_path, monkeypatch):
    from gpujob.usecases.secrets import file as nt

    f = tmp_path / "secrets.env"
    f.write_text('# comment\nexport A_KEY="quoted value"\nB_KEY=plain # trailing\nC_KEY=\'single\'\nbad line\n')
    os.chmod(f, 0o600)
    monkeypatch.setenv("GPUJOB_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("B_KEY", "from-env")
    monkeypatch.delenv("A_KEY", raising=False)
    assert nt.secrets_from_env(["A_KEY", "B_KEY", "C_KEY", "D_KEY"]) == \
        {"A_KEY": "quoted value", "B_KEY": "from-env", "C_KEY": "single"}
    assert nt.secrets_from_env(None, f) == {"A_KEY": "quoted value", "B_KEY": "from-env", "C_KEY": "single"}
    os.chmod(f, 0o644)
    with pytest.warns(nt.InsecureSecretsFileWarning):
        nt.secrets_from_env(["A_KEY"])
    with pytest.raises(FileNotFoundError):
        nt.secrets_from_env(["A_KEY"], tmp_path / "absent.env")
    monkeypatch.setenv("GPUJOB_CONFIG_DIR", str(tmp_path / "empty"))
    assert nt.secrets_from_env(["B_KEY", "Z_KEY"]) == {"B_KEY": "from-env"}
    assert nt.default_secrets_file() == Path(tmp_path / "empty" / "secrets.env")


def test_a_jobs_output_forms_no_markup_in_a_chat(srv, secrets, tmp_path):
    """What a job printed (its log tail, an exception's text as the diagnosis, a metric's name) is
    third-party text: it must not ping a channel or show as a link or image in gpujob's message."""
    _script_ok(srv)
    link, image = "[Resume the job](https://evil.example/r)", "![](https://evil.example/pixel.png)"
    event = dict(FAILED, diagnosis=f"RuntimeError: <!channel> @everyone {link}",
                 metrics={f"<https://evil.example|{link}>": 1.0, "loss": 0.5},
                 log_tail=[f"{image} <@U024BE7LH> <font color=\"warning\">{link}</font>", "@here"])
    outs = notify.send_all(_all_channels(srv)[:4], event, secrets, str(tmp_path), retries=1, backoff=0.01, timeout=5)
    assert all(o["ok"] for o in outs), outs
    slack = json.loads(srv.last("/services/")["body"])["text"]
    assert "<" not in slack.replace("&lt;", "") and "&lt;!channel&gt;" in slack, slack  # Slack's markup needs <…>
    discord = json.loads(srv.last("/api/webhooks/")["body"])
    assert discord["allowed_mentions"] == {"parse": []}, discord  # a printed @everyone pings no one
    head, _, fenced = discord["content"].partition("```")
    assert "\\[Resume the job\\]" in head and "\\<https" in head and "\\@everyone" in head, head
    assert image in fenced, fenced  # inside the fence Discord shows the line as it is
    wecom = json.loads(srv.last("/cgi-bin/webhook/send")["body"])["markdown"]["content"]
    ding = json.loads(srv.last("/robot/send")["body"])["markdown"]["text"]
    for md in (wecom, ding):  # the tail is unfenced there: no link, image, mention or tag may form
        assert "](" not in md and "<" not in md and "［Resume the job］" in md, md
