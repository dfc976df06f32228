"""What every channel shares: the error a send raises, the HTTP request it makes, and the
registry of channel kinds (``type:`` value -> the :class:`Channel` a module registered)."""

from collections import namedtuple
from typing import Callable, Dict, List, Mapping, Optional, Tuple, Type, TypedDict, Union

Request = namedtuple("Request", "url headers body")
Transport = Callable[[Request, float], Tuple[int, Dict[str, str], bytes]]
# One channel of ``notify.channels``, ``${NAME}`` resolved and checked (Channel.validate): every
# kind's keys, strings but for each kind's ``non_string_keys``.
ChannelConfig = TypedDict("ChannelConfig", {
    "type": str, "name": str, "on": Union[str, List[str]], "url": str, "secret": str, "msgtype": str,
    "access_token": str, "key": str, "keyword": str, "token": str, "sendkey": str, "username": str,
    "headers": Dict[str, str], "host": str, "port": int, "user": str, "password": str,
    "starttls": Union[bool, str], "ssl": bool, "from": str, "to": Union[str, List[str]], "timeout": float,
}, total=False)


class ChannelError(Exception):
    """A send that failed; ``final`` means retrying will not help."""

    def __init__(self, message: str, final: bool = False, status: Optional[int] = None,
                 retry_after: Optional[float] = None):
        super().__init__(message)
        self.final = final
        self.status = status
        self.retry_after = retry_after


class Channel:
    """One kind of channel: its keys, its checks, and how it delivers a message.

    A module per kind subclasses this (HTTP ones :class:`~.http_client.HttpChannel`) and
    decorates the class with :func:`register`.
    """

    type = ""  # the canonical ``type:`` value
    aliases: Tuple[str, ...] = ()  # other spellings of ``type:``
    required: Tuple[Tuple[str, ...], ...] = ()  # each group: one of its keys must be set
    optional: Tuple[str, ...] = ()
    secret_keys: Tuple[str, ...] = ()  # values kept out of spec.json and of every text
    non_string_keys: Tuple[str, ...] = ()  # keys whose values need not be strings

    def validate(self, ch: Mapping[str, object], where: str) -> List[str]:
        """Problems of this kind's own keys (the common ones are checked for every kind)."""
        return []

    def skip_reason(self, resolved: ChannelConfig, state_dir: Optional[str]) -> Optional[str]:
        """Why this message is not to be sent at all (a rate limit), or None."""
        return None

    def deliver(self, channel: Mapping[str, object], resolved: ChannelConfig, title: str, text: str,
                event: Mapping[str, object], secrets: Optional[Dict[str, str]], timeout: float,
                transport: Transport) -> Optional[int]:
        """Send one message: the HTTP status (None when not HTTP); :class:`ChannelError` when not delivered."""
        raise NotImplementedError


CHANNELS: Dict[str, Channel] = {}
ALIASES: Dict[str, str] = {}


def register(cls: Type[Channel]) -> Type[Channel]:
    """Class decorator: make ``cls`` the channel for its ``type`` and its aliases."""
    CHANNELS[cls.type] = cls()
    for alias in cls.aliases:
        ALIASES[alias] = cls.type
    return cls


def canonical(type_name: str) -> str:
    """``type_name`` with an alias (``lark``, ``smtp``...) resolved."""
    return ALIASES.get(type_name, type_name)


def channel_type(ch: Mapping[str, object]) -> str:
    """The canonical type of a channel config (aliases such as ``lark`` resolved)."""
    return canonical(str(ch.get("type", "")).strip().lower())


def kind_of(ch: Mapping[str, object]) -> Optional[Channel]:
    """The registered channel for a config, None for an unknown type."""
    return CHANNELS.get(channel_type(ch))
