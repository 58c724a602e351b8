"""Twilio's Messages and Calls lists (``GET /2010-04-01/Accounts/{AccountSid}/
Messages.json``, ``…/Calls.json``): the account's messages sent (calls started) since
a time (``DateSent>``, ``StartTime>``), newest first, ``PageSize`` a page, the next
page at ``next_page_uri`` (``From`` when the source names its numbers). Basic auth:
the Account SID (or an API key SID) and the token.

What can be reconciled: Twilio lists resources, not the callbacks it posted, and a
listed message or call shows only its status now. A status callback of that status
was posted when the resource reached it (``date_updated``), so the callback of the
status each listed resource shows can be checked; both paths key it
``message:<sid>:<status>`` or ``call:<sid>:<status>`` (``hookd.providers.twilio``).
The callbacks of the statuses it went through before (``queued``, ``sent`` once it
is ``delivered``, ``ringing``…) are not reconstructable and are not checked. Only
resources in a final or resting status are judged: an outbound message ``sent``,
``delivered``, ``undelivered``, ``failed`` or ``read``; a call ``completed``,
``busy``, ``failed``, ``no-answer`` or ``canceled``. Inbound messages (whose webhook
is no status callback) are not.

The list cannot say which messages and calls asked for a status callback, nor to
where: every one the source's filters leave (``from_numbers``,
``messaging_service_sids``) is taken to post its callbacks to this source.

An item's time is when it reached its status (``date_updated``; a call's
``end_time``), so the settle window counts from the callback. The lists filter on
when a message was sent or a call started: they are asked from ``status_delay_s``
before the window, and a resource that took longer to reach its status is not seen.
A message that failed before it was sent has no ``date_sent`` and is not listed.

A repair is the form body the status callback carries, as far as the listed resource
tells it (see ``message_form``, ``call_form``): no ``SequenceNumber``, no
``RawDlrDoneDate``, a call's ``Timestamp`` from its ``end_time``. Twilio's API does not
say what the receiver answered, nor show where a callback goes: no ack audit, no
registration check.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import TypedDict
from urllib.parse import urlencode

import httpx

from hookd.providers.twilio import (
    CALL_PROGRESS,
    TwilioReconcile,
    call_key,
    message_key,
    rfc2822_time,
)
from hookd.sources import Source, api_url
from reconcile.http import Api
from reconcile.providers.base import Item, ListAdapter, reconciled, settings_of
from store.intake.events import NewEvent

API_VERSION = "2010-04-01"
PAGE_SIZE = 1000
MESSAGE_STATUSES = frozenset({"sent", "delivered", "undelivered", "failed", "read"})
CALL_STATUSES = frozenset({"completed", "busy", "failed", "no-answer", "canceled"})
FORM = "application/x-www-form-urlencoded"


class Message(TypedDict, total=False):
    """A message of ``Messages.json``, the fields read of it."""

    sid: str
    account_sid: str
    messaging_service_sid: str | None
    to: str
    status: str
    direction: str
    date_sent: str | None
    date_updated: str | None
    error_code: int | None
    api_version: str
    # Twilio's From: written ``from`` in JSON.


class Call(TypedDict, total=False):
    """A call of ``Calls.json``, the fields read of it."""

    sid: str
    account_sid: str
    parent_call_sid: str | None
    to: str
    status: str
    direction: str
    start_time: str | None
    end_time: str | None
    date_updated: str | None
    duration: str | None
    forwarded_from: str | None
    caller_name: str | None
    api_version: str


def settings(source: Source) -> TwilioReconcile:
    return settings_of(source, TwilioReconcile)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _epoch(value: object) -> float | None:
    moment = rfc2822_time(_text(value))
    return None if moment is None else moment.timestamp()


def _rfc2822(at: float) -> str:
    """``Mon, 16 Aug 2010 03:45:01 +0000``: Twilio's times (``DateSent>`` takes them)."""
    return format_datetime(datetime.fromtimestamp(at, UTC))


def _pairs(values: list[tuple[str, object]]) -> list[tuple[str, str]]:
    """The parameters that have a value, as Twilio leaves out an empty one."""
    return [(k, str(v)) for k, v in values if v is not None and v != ""]


def message_form(message: Mapping[str, object]) -> list[tuple[str, str]]:
    """The parameters of a message's status callback for the status it shows:
    ``MessageSid``/``SmsSid``, ``MessageStatus``/``SmsStatus``, ``AccountSid``,
    ``From``, ``To``, ``ApiVersion``, ``MessagingServiceSid`` and ``ErrorCode`` when it
    has them."""
    return _pairs(
        [
            ("MessageSid", message.get("sid")),
            ("SmsSid", message.get("sid")),
            ("MessageStatus", message.get("status")),
            ("SmsStatus", message.get("status")),
            ("AccountSid", message.get("account_sid")),
            ("From", message.get("from")),
            ("To", message.get("to")),
            ("ApiVersion", message.get("api_version") or API_VERSION),
            ("MessagingServiceSid", message.get("messaging_service_sid")),
            ("ErrorCode", message.get("error_code")),
        ]
    )


def call_form(call: Mapping[str, object]) -> list[tuple[str, str]]:
    """The parameters of a call's status callback for the status it shows:
    ``CallSid``, ``CallStatus``, ``AccountSid``, ``From``, ``To``, ``Direction``,
    ``ApiVersion``, ``CallbackSource``, ``Timestamp`` (its end), ``CallDuration``, and
    ``ParentCallSid``, ``ForwardedFrom``, ``CallerName`` when it has them."""
    return _pairs(
        [
            ("CallSid", call.get("sid")),
            ("CallStatus", call.get("status")),
            ("AccountSid", call.get("account_sid")),
            ("From", call.get("from")),
            ("To", call.get("to")),
            ("Direction", call.get("direction")),
            ("ApiVersion", call.get("api_version") or API_VERSION),
            ("CallbackSource", CALL_PROGRESS),
            ("Timestamp", call.get("end_time") or call.get("date_updated")),
            ("CallDuration", call.get("duration")),
            ("ParentCallSid", call.get("parent_call_sid")),
            ("ForwardedFrom", call.get("forwarded_from")),
            ("CallerName", call.get("caller_name")),
        ]
    )


class TwilioAdapter(ListAdapter):
    def __init__(self, source: Source, api: Api, meta: Mapping[str, str], now: float) -> None:
        super().__init__(source, api, meta, now)
        self._rc = settings(source)
        self._base = api_url(source.config)
        assert self._rc.account_sid is not None
        self._account = f"{self._base}/{API_VERSION}/Accounts/{self._rc.account_sid}"

    @staticmethod
    def auth_headers(source: Source) -> dict[str, str]:
        rc = settings(source)
        user = rc.api_key_sid or rc.account_sid or ""
        pair = f"{user}:{rc.token or ''}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}

    async def pages(self, since: float) -> AsyncIterator[list[Item]]:
        after = _rfc2822(max(0.0, since - self._rc.status_delay_s))
        senders: tuple[str | None, ...] = self._rc.from_numbers or (None,)
        for listed in self._rc.lists:
            for sender in senders:
                resource, field = (
                    ("Messages", "DateSent>") if listed == "messages" else ("Calls", "StartTime>")
                )
                query: list[tuple[str, str | int]] = [(field, after), ("PageSize", PAGE_SIZE)]
                if sender is not None:
                    query.append(("From", sender))
                url = f"{self._account}/{resource}.json?{urlencode(query)}"
                async for items in self._pages(url, listed, since):
                    yield items

    async def _pages(self, url: str, listed: str, since: float) -> AsyncIterator[list[Item]]:
        key = "messages" if listed == "messages" else "calls"
        while True:
            answer = (await self.api.request("GET", url)).json()
            resources = answer[key]
            items = []
            for resource in resources:
                item = self._message(resource) if key == "messages" else self._call(resource)
                if item is not None and item.time >= since:
                    items.append(item)
            yield items
            following = _text(answer.get("next_page_uri"))
            if following is None or not resources:
                return
            url = str(httpx.URL(self._base).join(following))

    def _message(self, message: Mapping[str, object]) -> Item | None:
        sid, status = _text(message.get("sid")), _text(message.get("status"))
        direction = _text(message.get("direction")) or ""
        if sid is None or status not in MESSAGE_STATUSES or not direction.startswith("outbound"):
            return None
        services = self._rc.messaging_service_sids
        if services and message.get("messaging_service_sid") not in services:
            return None
        when = _epoch(message.get("date_updated")) or _epoch(message.get("date_sent"))
        if when is None:
            return None
        assert status is not None
        return Item(key=message_key(sid, status), time=when, ref=sid, obj=message)

    def _call(self, call: Mapping[str, object]) -> Item | None:
        sid, status = _text(call.get("sid")), _text(call.get("status"))
        if sid is None or status not in CALL_STATUSES:
            return None
        when = _epoch(call.get("end_time")) or _epoch(call.get("date_updated"))
        if when is None:
            return None
        assert status is not None
        return Item(key=call_key(sid, status), time=when, ref=sid, obj=call)

    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        resource = item.obj or {}
        is_message = item.key.startswith("message:")
        form = message_form(resource) if is_message else call_form(resource)
        status = str(resource.get("status"))
        return reconciled(
            source=self.source.name,
            provider=self.source.provider,
            key=item.key,
            type_=f"{'message' if is_message else 'call'}.{status}",
            occurred=item.time,
            headers={"content-type": FORM},
            body=urlencode(form).encode("ascii"),
            how=f"reconcile:twilio-api;{'message' if is_message else 'call'}={item.ref}",
            received_at=received_at,
        )
