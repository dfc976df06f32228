"""``email`` (alias ``smtp``): one mail per message over SMTP, TLS whenever the server offers it."""

import smtplib
import socket
import ssl
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any, Dict, List, Mapping, Optional

from .base import Channel, ChannelConfig, ChannelError, Transport, register


@register
class Email(Channel):
    type = "email"
    aliases = ("smtp",)
    required = (("host",), ("to",))
    optional = ("port", "user", "password", "starttls", "ssl", "from", "timeout")
    secret_keys = ("password",)
    non_string_keys = ("to", "port", "starttls", "ssl", "timeout")

    def validate(self, ch: Mapping[str, object], where: str) -> List[str]:
        errs = []  # type: List[str]
        to = ch.get("to")
        if isinstance(to, str):
            to = [to]
        if to is not None and (not isinstance(to, list) or not all(isinstance(x, str) and "@" in x for x in to)):
            errs.append("%s.to: must be an address or a list of addresses" % where)
        port = ch.get("port")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
            errs.append("%s.port: must be a port number" % where)
        if ch.get("starttls") not in (None, True, False, "auto"):
            errs.append("%s.starttls: must be true, false or auto" % where)
        if ch.get("ssl") not in (None, True, False):
            errs.append("%s.ssl: must be true or false" % where)
        if ch.get("ssl") is True and ch.get("starttls") is True:
            errs.append("%s.starttls: cannot be combined with ssl: true" % where)
        if ch.get("password") and not ch.get("user"):
            errs.append("%s.user: required when a password is given" % where)
        tmo = ch.get("timeout")
        if tmo is not None and (isinstance(tmo, bool) or not isinstance(tmo, (int, float)) or not 0 < tmo <= 3600):
            errs.append("%s.timeout: must be a number of seconds from 0 to 3600" % where)
        return errs

    def deliver(self, channel: Mapping[str, object], resolved: ChannelConfig, title: str, text: str,
                event: Mapping[str, object], secrets: Optional[Dict[str, str]], timeout: float,
                transport: Transport) -> Optional[int]:
        send_email(resolved, title, text, timeout)
        return None


def send_email(channel: ChannelConfig, title: str, text: str, timeout: float = 10.0) -> None:
    """Send one mail (``channel`` already resolved). SSL on port 465 or ``ssl: true``; STARTTLS
    when ``starttls: true`` or, with ``auto`` (the default), when the server offers it; a
    password is never sent in clear unless ``starttls: false`` says so."""
    host = channel["host"]
    use_ssl = channel.get("ssl")
    port = int(channel.get("port") or (465 if use_ssl else 587))
    if use_ssl is None:
        use_ssl = port == 465
    starttls = channel.get("starttls", "auto")
    to = channel["to"]
    to = [to] if isinstance(to, str) else list(to)
    user = channel.get("user")
    sender = channel.get("from") or user or "gpujob@%s" % socket.gethostname()
    msg = EmailMessage()
    msg["Subject"] = title
    msg["From"] = sender
    msg["To"] = ", ".join(to)
    msg["Date"] = formatdate(localtime=True)
    msg["Message-ID"] = make_msgid(domain="gpujob")
    msg.set_content(text)
    timeout = float(channel.get("timeout") or timeout)
    ctx = ssl.create_default_context()
    try:
        if use_ssl:
            smtp = smtplib.SMTP_SSL(host, port, timeout=timeout, context=ctx)  # type: smtplib.SMTP
        else:
            smtp = smtplib.SMTP(host, port, timeout=timeout)
    except (OSError, smtplib.SMTPException) as e:
        raise ChannelError("SMTP connect to %s:%d failed: %s" % (host, port, e)) from e
    try:
        smtp.ehlo()
        secure = bool(use_ssl)
        if not use_ssl and starttls is not False:
            if smtp.has_extn("starttls"):
                smtp.starttls(context=ctx)
                smtp.ehlo()
                secure = True
            elif starttls is True:
                raise ChannelError("SMTP server %s offers no STARTTLS (starttls: true)" % host, final=True)
        if user:
            if not secure and starttls is not False:
                raise ChannelError("SMTP server %s offers no TLS; refusing to send the password in clear "
                                   "(set starttls: false to allow it)" % host, final=True)
            smtp.login(user, channel.get("password") or "")
        smtp.send_message(msg, from_addr=sender, to_addrs=to)
    except ChannelError:
        raise
    except smtplib.SMTPAuthenticationError as e:
        raise ChannelError("SMTP login refused: %s %s" % (e.smtp_code, _b2s(e.smtp_error)), final=True) from e
    except smtplib.SMTPResponseException as e:
        raise ChannelError("SMTP %s %s" % (e.smtp_code, _b2s(e.smtp_error)), final=500 <= e.smtp_code < 600) from e
    except smtplib.SMTPRecipientsRefused as e:
        raise ChannelError("SMTP recipients refused: %s" % e, final=True) from e
    except (OSError, smtplib.SMTPException) as e:
        raise ChannelError("SMTP error: %s" % e) from e
    finally:
        try:
            smtp.quit()
        except Exception:
            try:
                smtp.close()
            except Exception:
                pass


def _b2s(b: Any) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)

