"""Notification channels, sent by the agent (standard library only, Python 3.8+).

One call from the agent::

    outcomes = notify.notify_event(spec.notify, event, secrets, state_dir, log=log)  # spec: a JobSpec

It never raises and never blocks longer than the retries of each channel. Channels: generic JSON
``webhook`` (HMAC-SHA256 signature when a secret is set), ``slack``, ``discord``, ``wecom``
(WeCom group robot), ``dingtalk`` (signed), ``feishu``/``lark`` (signed), ``serverchan``,
``autodl`` (AutoDL WeChat push, rate-limited client-side) and ``email`` (SMTP).

Config values written ``${NAME}`` are taken from ``secrets`` (the agent's 0600 secrets file);
a literal value at a secret key works too and is treated as a secret. Every error text,
outcome and log line goes through :func:`redact`; so do the messages themselves.

The package: ``base`` (the :class:`Channel` kind and its registry), ``section`` (the ``notify:``
checks, ``on:``), ``redaction`` (``${NAME}``, secrets out of spec.json, :func:`redact`),
``render`` (event -> title and text), ``http_client`` (requests, the POST, answers, the group-robot base),
``ratelimit`` (sends per key over a day), ``send`` (retries, every channel, the agent's call),
and one module per channel kind. A new kind: a module whose :class:`Channel` subclass is
decorated with ``@register``, and its name on the import line below. The laptop loads it with ``gpujob.bundle.import_remote("notify")``.
"""

# each channel module registers its kind
from . import autodl, dingtalk, discord, feishu, serverchan, slack, smtp, webhook, wecom  # noqa: F401
from .autodl import AUTODL_PER_DAY, AUTODL_PER_MINUTE, AUTODL_URL
from .base import CHANNELS, Channel, ChannelError, Request, Transport, channel_type, register
from .dingtalk import dingtalk_sign
from .feishu import feishu_sign
from .http_client import WHOLE_ANSWER, build_request, check_response, urllib_transport, within
from .redaction import (
    MIN_SECRET_LEN,
    REDACTED,
    all_sensitive,
    externalize_secrets,
    redact,
    resolve_channel,
    secret_names,
)
from .render import render
from .section import DEFAULT_ON, EVENTS, validate_channels, wants
from .send import channel_names, format_outcome, notify_event, send_all, send_channel
from .serverchan import serverchan_url
from .smtp import send_email
from .webhook import webhook_signature

__all__ = [
    "AUTODL_PER_DAY", "AUTODL_PER_MINUTE", "AUTODL_URL", "CHANNELS", "Channel", "ChannelError", "DEFAULT_ON",
    "WHOLE_ANSWER", "within",
    "EVENTS", "MIN_SECRET_LEN", "REDACTED", "Request", "Transport", "channel_names", "all_sensitive",
    "build_request", "channel_type", "check_response", "dingtalk_sign", "externalize_secrets", "feishu_sign",
    "format_outcome", "notify_event", "redact", "register", "render", "resolve_channel", "secret_names",
    "send_all", "send_channel", "send_email", "serverchan_url", "urllib_transport", "validate_channels",
    "wants", "webhook_signature",
]
