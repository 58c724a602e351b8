"""The channels a notification goes through, one per ``[[notify]]`` table: Slack's
incoming webhook, a Standard Webhooks-signed POST, PagerDuty's Events API v2, email.

``channel_for(config, client)`` makes one. ``Channel.wants(item)`` says whether an alert
is for it (its ``kinds``, ``sources`` and ``min_severity``); ``Channel.send(message)``
sends a message and returns a short receipt (``200 ok``), or raises ``ChannelError``:
``permanent`` when sending it again cannot succeed (a 4xx other than 408 and 429, a
redirect, an SMTP 5xx), else retryable.

HTTP goes as a destination's delivery does (``processing.delivery.post_bounded``):
the whole exchange bounded by ``timeout_s``, at most 4 KiB of the answer read, no
redirect followed. No secret (a Slack URL's token, a routing key, an SMTP password)
is ever in a ``ChannelError`` or a log line: reasons name the host, never the URL.
"""

from __future__ import annotations

import asyncio
import json
import smtplib
import socket
import ssl
import time
from abc import ABC, abstractmethod
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import parseaddr
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit

import httpx

from hookd.notify.message import AlertItem, Message, Severity
from hookd.notify.render import (
    email_message,
    one_line,
    pagerduty_events,
    slack_payload,
    webhook_payload,
)
from hookd.providers.standard import standard_headers
from hookd.sources.notify import NotifyConfig
from processing.deadlines import DeadlineExceeded, within
from processing.delivery import Answer, post_bounded

# The most of a receiver's answer a reason or a receipt quotes.
SAID_CHARS = 120
# Secrets shorter than this are not searched for in a reason (they would match
# ordinary words); reasons are built from codes and host names in the first place.
_SCRUB_MIN = 4
# An email channel's connection gets this long past its timeout_s to finish closing.
SMTP_SLACK_S = 1.0


class ChannelError(Exception):
    """A message not sent: ``reason`` is one line without a secret; ``permanent`` when
    sending it again cannot succeed (the channel's settings must change)."""

    def __init__(self, reason: str, permanent: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.permanent = permanent


def wants(config: NotifyConfig, item: AlertItem) -> bool:
    """Whether the alert is for the channel of ``config``: one of its ``kinds``, about
    one of its ``sources`` (a channel that lists sources gets no alert about none), at
    its ``min_severity`` or above."""
    if item.kind not in config.kinds or item.severity.rank < Severity(config.min_severity).rank:
        return False
    return config.sources is None or item.source in config.sources


class Channel(ABC):
    """One ``[[notify]]`` table's channel."""

    kind: ClassVar[str]

    def __init__(self, config: NotifyConfig, client: httpx.AsyncClient) -> None:
        self.name = config.name
        self.config = config
        self._client = client
        self._min_rank = Severity(config.min_severity).rank

    def wants(self, item: AlertItem) -> bool:
        return wants(self.config, item)

    @abstractmethod
    async def send(self, message: Message) -> str:
        """Send ``message``; a short receipt of the answer (``200 ok``)."""

    def _secrets(self) -> list[str]:
        c = self.config
        found = [c.url or "", c.secret or "", c.routing_key or "", c.smtp_url or ""]
        if c.url:
            parts = urlsplit(c.url)
            found += [parts.path, parts.query, parts.password or "", parts.username or ""]
        if c.smtp_url:
            found += [c.smtp.password or ""]
        found += [quote(s, safe="") for s in found]
        return sorted({s for s in found if len(s) >= _SCRUB_MIN}, key=len, reverse=True)

    def failure(self, reason: str, *, permanent: bool) -> ChannelError:
        """A ``ChannelError`` whose reason is one line holding no secret of this channel."""
        text = one_line(reason)
        for secret in self._secrets():
            text = text.replace(secret, "…")
        return ChannelError(text, permanent)


class _HttpChannel(Channel):
    """A channel that POSTs JSON as a destination's delivery is sent."""

    @property
    def host(self) -> str:
        return urlsplit(self.config.post_url).hostname or "?"

    async def _post_json(self, payload: Any) -> Answer:
        body = json.dumps(payload, separators=(",", ":")).encode()
        return await self._post(body, {"Content-Type": "application/json"})

    async def _post(self, body: bytes, headers: dict[str, str]) -> Answer:
        """POST ``body``: the answer when it is a 2xx, else a ``ChannelError``."""
        timeout_s = self.config.timeout_s
        try:
            answer = await post_bounded(
                self._client, self.config.post_url, body, headers, timeout_s
            )
        except (httpx.TimeoutException, DeadlineExceeded):
            raise self.failure(
                f"{self.host} did not answer within {timeout_s:g}s", permanent=False
            ) from None
        except httpx.HTTPError as exc:
            raise self.failure(_unreachable(self.host, exc), permanent=False) from None
        if answer.status >= 300:
            raise self._refused(answer)
        return answer

    def _refused(self, answer: Answer) -> ChannelError:
        status = answer.status
        if status < 400:
            where = urlsplit(answer.location or "").hostname
            said = f"redirect to {where} not followed" if where else "redirect not followed"
            return self.failure(
                f"{self.host} answered {status}: {said}: configure the final URL",
                permanent=True,
            )
        said = self._said(answer)
        permanent = status < 500 and status not in (408, 429)
        return self.failure(
            f"{self.host} answered {status}" + (f" {said}" if said else ""), permanent=permanent
        )

    def _said(self, answer: Answer) -> str:
        """What the answer's body says, briefly (Slack: ``no_service``)."""
        return _plain(answer.head)


class SlackChannel(_HttpChannel):
    """Slack's incoming webhook: 200 ``ok``; 400 ``invalid_payload``, 403
    ``invalid_token``, 404 ``no_service``, 410 ``channel_is_archived``: all permanent."""

    kind = "slack"

    async def send(self, message: Message) -> str:
        answer = await self._post_json(slack_payload(message))
        return f"{answer.status} {_plain(answer.head) or 'ok'}"


class WebhookChannel(_HttpChannel):
    """A POST signed with Standard Webhooks v1: ``webhook-id`` is the message's id (a
    receiver drops a retry it has seen), signed as a destination signs."""

    kind = "webhook"

    async def send(self, message: Message) -> str:
        now = time.time()
        payload = webhook_payload(message, datetime.fromtimestamp(now, UTC))
        body = json.dumps(payload, separators=(",", ":")).encode()
        assert self.config.secret is not None
        headers = standard_headers(self.config.secret, body, message.id, int(now))
        answer = await self._post(body, headers)
        said = _plain(answer.head)
        return f"{answer.status}" + (f" {said}" if said else "")


class PagerDutyChannel(_HttpChannel):
    """PagerDuty's Events API v2: one event per alert, its ``dedup_key`` the alert's kind
    and key, so a reminder re-triggers the same incident and a resolution resolves it.
    202 ``{"status": "success"}``; 400 (an invalid event) is permanent, 429 is not."""

    kind = "pagerduty"

    async def send(self, message: Message) -> str:
        said = ""
        events = pagerduty_events(message)
        for event in events:
            answer = await self._post_json({"routing_key": self.config.routing_key, **event})
            said = f"{answer.status} {self._said(answer)}".rstrip()
        return said if len(events) == 1 else f"{said} ({len(events)} events)"

    def _said(self, answer: Answer) -> str:
        """``success``, or the message and errors of an invalid event."""
        try:
            data = json.loads(answer.head)
        except ValueError:
            return _plain(answer.head)
        if not isinstance(data, dict):
            return ""
        words = [data.get("status"), data.get("message")]
        errors = data.get("errors")
        if isinstance(errors, list):
            words += errors
        return _plain("; ".join(str(w) for w in words if w).encode())


class EmailChannel(Channel):
    """SMTP: STARTTLS (or smtps://), verified against the system's CAs or ``ca_file``;
    login only after TLS unless ``allow_insecure``. smtplib runs in a thread: mail is
    rare, and the standard library's client needs nothing installed."""

    kind = "email"

    async def send(self, message: Message) -> str:
        config = self.config
        assert config.sender is not None
        assert config.to is not None
        sender = parseaddr(config.sender)[1]
        to = [parseaddr(address)[1] for address in config.to]
        domain = sender.rpartition("@")[2]
        mail = email_message(message, config.sender, config.to, domain, datetime.now(UTC))
        timeout_s = config.timeout_s
        server = config.smtp
        try:
            # Each socket operation is bounded by timeout_s; the whole exchange here too (a
            # thread cannot be stopped: one past its deadline ends at its next timeout).
            return await within(
                asyncio.to_thread(self._deliver, mail, sender, to),
                timeout_s + SMTP_SLACK_S,
                what="email",
            )
        except ChannelError:
            raise
        except (TimeoutError, DeadlineExceeded):
            raise self.failure(
                f"{server.host}:{server.port} did not answer within {timeout_s:g}s",
                permanent=False,
            ) from None
        except smtplib.SMTPAuthenticationError as exc:
            raise self.failure(
                f"{server.host} refused the login ({exc.smtp_code}): check smtp_url's user "
                "and password",
                permanent=True,
            ) from None
        except smtplib.SMTPRecipientsRefused as exc:
            codes = sorted({code for code, _ in exc.recipients.values()})
            raise self.failure(
                f"{server.host} refused every recipient ({', '.join(map(str, codes))})",
                permanent=all(code >= 500 for code in codes),
            ) from None
        except smtplib.SMTPResponseException as exc:
            raise self.failure(
                f"{server.host} answered {exc.smtp_code} ({type(exc).__name__})",
                permanent=exc.smtp_code >= 500,
            ) from None
        except smtplib.SMTPNotSupportedError:
            raise self.failure(
                f"{server.host} does not offer what is needed (AUTH after TLS): check the "
                "server's settings",
                permanent=True,
            ) from None
        except ssl.SSLCertVerificationError as exc:
            raise self.failure(
                f"{server.host}'s certificate is not trusted ({exc.verify_message}): set "
                "ca_file to the certificate it presents, or its CA",
                permanent=False,
            ) from None
        except (OSError, smtplib.SMTPException) as exc:
            raise self.failure(
                f"cannot reach {server.host}:{server.port}: {_socket_words(exc)}",
                permanent=False,
            ) from None

    def _deliver(self, mail: EmailMessage, sender: str, to: list[str]) -> str:
        """The SMTP exchange (in a worker thread): TLS, login, the message."""
        config = self.config
        server = config.smtp
        context = ssl.create_default_context(cafile=config.ca_file)
        # The EHLO name: this host's name as it is, never looked up (getfqdn may wait on DNS).
        me = socket.gethostname() or "hookd"
        smtp: smtplib.SMTP
        if server.implicit_tls:
            smtp = smtplib.SMTP_SSL(
                server.host,
                server.port,
                local_hostname=me,
                timeout=config.timeout_s,
                context=context,
            )
        else:
            smtp = smtplib.SMTP(
                server.host, server.port, local_hostname=me, timeout=config.timeout_s
            )
        with smtp:
            smtp.ehlo()
            if not server.implicit_tls and config.starttls:
                if not smtp.has_extn("starttls"):
                    # Never fall back to plain text: the channel asked for TLS.
                    raise self.failure(
                        f"{server.host} does not offer STARTTLS: use a server that does, or "
                        "smtps://",
                        permanent=True,
                    )
                smtp.starttls(context=context)
                smtp.ehlo()
            if server.user is not None:
                smtp.login(server.user, server.password or "")
            smtp.sendmail(sender, to, mail.as_bytes())
        n = len(to)
        return f"250 accepted for {n} recipient{'s' if n != 1 else ''}"


_CHANNELS: dict[str, type[Channel]] = {
    c.kind: c for c in (SlackChannel, WebhookChannel, PagerDutyChannel, EmailChannel)
}


def channel_for(config: NotifyConfig, client: httpx.AsyncClient) -> Channel:
    """The channel of a ``[[notify]]`` table; ``client`` sends its HTTP (shared, as the
    destinations share theirs)."""
    return _CHANNELS[config.kind](config, client)


def _plain(head: bytes) -> str:
    """The start of an answer's body as one short line of printable text."""
    text = head.decode("utf-8", errors="replace").split("\n", 1)[0]
    text = "".join(c for c in text if c.isprintable()).strip()
    return text if len(text) <= SAID_CHARS else text[: SAID_CHARS - 1] + "…"


def _unreachable(host: str, exc: httpx.HTTPError) -> str:
    """A transport failure in words that hold no URL (httpx's own may)."""
    if isinstance(exc, httpx.ConnectError):
        return (
            f"cannot connect to {host} (nothing listens there, the host is unknown, or TLS failed)"
        )
    return f"cannot reach {host}: {type(exc).__name__}"


def _socket_words(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return "the host is unknown"
    if isinstance(exc, smtplib.SMTPServerDisconnected):
        return "the server closed the connection"
    if isinstance(exc, ssl.SSLError):
        return f"TLS failed ({exc.reason or type(exc).__name__})"
    return type(exc).__name__
