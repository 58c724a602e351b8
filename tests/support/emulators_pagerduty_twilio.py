"""In-memory emulators of the PagerDuty REST API and Twilio's Messages and Calls lists,
built like those of ``tests.support.emulators`` (and on their shared base): a small
Starlette app (``.app``) answering in the provider's documented shapes, an in-memory
record, and the signed webhooks to send to a hookd receiver with drops, duplicates and
reordering.

- :class:`PagerDutyEmulator`: ``GET /log_entries`` (``since``/``until``,
  ``is_overview``, ``include[]=incidents``, ``team_ids[]``, ``offset``/``limit`` up to
  100 with ``more``, offset + limit at most 10,000), ``GET /webhook_subscriptions``
  and ``GET /webhook_subscriptions/{id}``; ``Authorization: Token token=…``. Shapes
  from PagerDuty's OpenAPI description (PagerDuty/api-schema,
  reference/REST/openapiv3.json: the ``/log_entries`` response example, a
  ``trigger_log_entry`` "Q02JTSNZWHSEKV" of incident "PT4KHLK"; the
  ``ListSubscriptionExample``) and its V3 webhook overview (the ``incident`` data
  type). Each incident is triggered (a ``trigger_log_entry``, a ``notify_log_entry``
  that ``is_overview`` leaves out, an ``incident.triggered`` webhook whose ``event.id``
  is a ULID unrelated to the entry's id); every ``ack_every``-th is acknowledged too
  (an ``acknowledge_log_entry`` and an ``incident.acknowledged`` webhook).
- :class:`TwilioEmulator`: ``GET /2010-04-01/Accounts/{sid}/Messages.json``
  (``DateSent>``/``DateSent<``, ``From``, ``To``, ``PageSize`` up to 1,000, paged with
  ``next_page_uri``/``PageToken``) and ``…/Calls.json`` (``StartTime>``, ``Status``),
  Basic auth with the Account SID or an API key. Shapes from Twilio's OpenAPI
  description (twilio/twilio-oai, spec/json/twilio_api_v2010.json:
  ``api.v2010.account.message`` and ``api.v2010.account.call`` and their list
  envelopes); times RFC 2822. Each outbound message posts a ``sent`` and then a final
  status callback (``delivered``; every ``fail_every``-th ``undelivered`` with error
  30003); each call a ``completed`` one. Every ``inbound_every``-th message is an
  inbound one (listed, no status callback).

Common (from the shared base): ``api_calls``, ``calls_by_path``, ``now``,
``fail_next(status, count, retry_after)``, ``send_webhooks(client, url, secret, drop=,
duplicate=, shuffle=)``.
"""

from __future__ import annotations

import base64
import hmac
import itertools
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hookd.providers.pagerduty import pagerduty_headers, triggered_key
from hookd.providers.twilio import call_key, message_key, twilio_signature
from tests.support.emulators import WebhookRequest, _compact, _Emulator, _retry_after

# The properties of a message, a call and a page of either in Twilio's OpenAPI
# description (twilio/twilio-oai, spec/json/twilio_api_v2010.json:
# ``api.v2010.account.message``, ``api.v2010.account.call``, ``ListMessageResponse``).
TWILIO_MESSAGE_FIELDS = frozenset(
    [
        "account_sid",
        "api_version",
        "body",
        "date_created",
        "date_sent",
        "date_updated",
        "direction",
        "error_code",
        "error_message",
        "from",
        "messaging_service_sid",
        "num_media",
        "num_segments",
        "price",
        "price_unit",
        "sid",
        "status",
        "subresource_uris",
        "to",
        "uri",
    ]
)
TWILIO_CALL_FIELDS = frozenset(
    [
        "account_sid",
        "answered_by",
        "api_version",
        "caller_name",
        "date_created",
        "date_updated",
        "direction",
        "duration",
        "end_time",
        "forwarded_from",
        "from",
        "from_formatted",
        "group_sid",
        "parent_call_sid",
        "phone_number_sid",
        "price",
        "price_unit",
        "queue_time",
        "sid",
        "start_time",
        "status",
        "subresource_uris",
        "to",
        "to_formatted",
        "trunk_sid",
        "uri",
    ]
)
TWILIO_PAGE_FIELDS = frozenset(
    [
        "end",
        "first_page_uri",
        "next_page_uri",
        "page",
        "page_size",
        "previous_page_uri",
        "start",
        "uri",
    ]
)
# The fields of the ``trigger_log_entry`` of the ``GET /log_entries`` response example
# in PagerDuty's OpenAPI description (PagerDuty/api-schema,
# reference/REST/openapiv3.json), and of its page.
PAGERDUTY_TRIGGER_FIELDS = frozenset(
    [
        "id",
        "type",
        "summary",
        "self",
        "html_url",
        "created_at",
        "agent",
        "channel",
        "incident",
        "teams",
        "contexts",
        "event_details",
    ]
)
PAGERDUTY_PAGE_FIELDS = frozenset({"log_entries", "limit", "offset", "more", "total"})
ULID_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
PD_MAX_LIMIT = 100
PD_MAX_OFFSET_END = 10_000
TWILIO_MAX_PAGE = 1000


def _iso(at: float) -> str:
    return datetime.fromtimestamp(int(at), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _when(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _rfc2822(at: float) -> str:
    return format_datetime(datetime.fromtimestamp(int(at), UTC))


def _twilio_time(text: str | None) -> float | None:
    """A ``DateSent>`` value as Twilio takes it: RFC 2822, ISO 8601 or a date."""
    if not text:
        return None
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


# ---------------------------------------------------------------------------------
# PagerDuty
# ---------------------------------------------------------------------------------


class PagerDutyEmulator(_Emulator):
    """The log of one PagerDuty account's incidents, and its webhook subscriptions."""

    def __init__(
        self,
        api_key: str,
        *,
        subscription_url: str = "https://hookd.example/hooks/pagerduty",
        ack_every: int = 4,
        services: tuple[str, ...] = ("PF9KMXH",),
    ) -> None:
        self.api_key = api_key
        self.ack_every = ack_every
        self.services = services
        self._serial = itertools.count(1)
        self.incidents: dict[str, dict[str, Any]] = {}
        self.log_entries: list[dict[str, Any]] = []
        # (key hookd stores it under, the webhook body), in the order they happened.
        self.webhooks: list[tuple[str, dict[str, Any]]] = []
        self.queries: list[dict[str, Any]] = []
        self.subscriptions: list[dict[str, Any]] = [
            {
                "delivery_method": {
                    "id": "PF9KMXH",
                    "secret": None,
                    "type": "http_delivery_method",
                    "url": subscription_url,
                    "custom_headers": [],
                },
                "description": "Sends PagerDuty v3 webhook events to hookd.",
                "events": ["incident.triggered", "incident.acknowledged", "incident.resolved"],
                "filter": {"id": services[0], "type": "service_reference"},
                "id": "PY1OL64",
                "type": "webhook_subscription",
                "active": True,
            }
        ]
        super().__init__()

    # -- IDs and recording -------------------------------------------------------
    def object_id(self, prefix: str) -> str:
        return prefix + f"{next(self._serial):06d}" + secrets.token_hex(3).upper()

    @staticmethod
    def ulid() -> str:
        return "01" + "".join(secrets.choice(ULID_ALPHABET) for _ in range(24))

    def _ref(self, kind: str, ident: str, summary: str) -> dict[str, str]:
        path = {"service": "services", "user": "users", "team": "teams"}[kind]
        return {
            "id": ident,
            "type": f"{kind}_reference",
            "summary": summary,
            "self": f"https://api.pagerduty.com/{path}/{ident}",
            "html_url": f"https://acme.pagerduty.com/{path}/{ident}",
        }

    def add_incident(self, at: float, service: str | None = None) -> str:
        """An incident triggered at ``at`` (its log entries, its webhooks); returns the
        key hookd stores its ``incident.triggered`` webhook under."""
        number = len(self.incidents) + 1
        incident_id = self.object_id("P")
        service_id = service or self.services[(number - 1) % len(self.services)]
        user = self._ref("user", "PTUXL6G", "User 123")
        incident = {
            "id": incident_id,
            "type": "incident",
            "summary": f"[#{number}] The server is on fire.",
            "self": f"https://api.pagerduty.com/incidents/{incident_id}",
            "html_url": f"https://acme.pagerduty.com/incidents/{incident_id}",
            "incident_number": number,
            "number": number,
            "title": "The server is on fire.",
            "created_at": _iso(at),
            "status": "triggered",
            "incident_key": secrets.token_hex(16),
            "service": self._ref("service", service_id, "API Service"),
            "assignments": [{"at": _iso(at), "assignee": user}],
            "escalation_policy": {
                "id": "PUS0KTE",
                "type": "escalation_policy_reference",
                "summary": "Default",
                "self": "https://api.pagerduty.com/escalation_policies/PUS0KTE",
                "html_url": "https://acme.pagerduty.com/escalation_policies/PUS0KTE",
            },
            "teams": [self._ref("team", "PQ9K7I8", "Engineering")],
            "urgency": "high",
            "priority": None,
            "resolve_reason": None,
        }
        self.incidents[incident_id] = incident
        trigger = self._entry("trigger_log_entry", at, incident, "Triggered through the API")
        trigger["agent"] = self._ref("service", service_id, "API Service")
        trigger["channel"] = {"type": "api"}
        trigger["event_details"] = {"description": incident["title"]}
        self.log_entries.append(trigger)
        self.log_entries.append(self._entry("notify_log_entry", at + 1, incident, "Notified"))
        data = {k: v for k, v in incident.items() if k not in {"assignments", "summary"}}
        data["assignees"] = [user]
        key = triggered_key(incident_id)
        self.webhooks.append((key, self._event("incident.triggered", at, trigger, data)))
        if number % self.ack_every == 0:
            ack = self._entry("acknowledge_log_entry", at + 2, incident, "Acknowledged")
            ack["agent"] = user
            self.log_entries.append(ack)
            acked = dict(data, status="acknowledged")
            event = self._event("incident.acknowledged", at + 2, ack, acked)
            self.webhooks.append((event["event"]["id"], event))
        return key

    def add_events(self, n: int, start: float, step_s: float) -> list[str]:
        """``n`` incidents triggered at ``start``, ``start + step_s``, ...; returns the
        keys of their ``incident.triggered`` webhooks."""
        return [self.add_incident(start + i * step_s) for i in range(n)]

    def _entry(
        self, kind: str, at: float, incident: Mapping[str, Any], summary: str
    ) -> dict[str, Any]:
        entry_id = "Q" + self.object_id("")
        return {
            "id": entry_id,
            "type": kind,
            "summary": summary,
            "self": f"https://api.pagerduty.com/log_entries/{entry_id}",
            "html_url": f"{incident['html_url']}/log_entries/{entry_id}",
            "created_at": _iso(at),
            "agent": None,
            "channel": {"type": "auto"},
            "service": incident["service"],
            "incident": {
                "id": incident["id"],
                "type": "incident_reference",
                "summary": incident["summary"],
                "self": incident["self"],
                "html_url": incident["html_url"],
            },
            "teams": incident["teams"],
            "contexts": [],
        }

    def _event(
        self, kind: str, at: float, entry: Mapping[str, Any], data: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {
            "event": {
                "id": self.ulid(),
                "event_type": kind,
                "resource_type": "incident",
                "occurred_at": datetime.fromtimestamp(int(at), UTC).strftime(
                    "%Y-%m-%dT%H:%M:%S.000Z"
                ),
                "agent": entry.get("agent"),
                "client": None,
                "data": dict(data),
            }
        }

    def webhook_keys(self) -> list[str]:
        """The keys hookd stores the webhooks under, one per webhook sent."""
        return [key for key, _ in self.webhooks]

    # -- webhooks ------------------------------------------------------------------
    def _webhook_requests(self, secret: str) -> list[WebhookRequest]:
        requests = []
        for key, event in self.webhooks:
            body = _compact(event)
            requests.append((key, body, pagerduty_headers(secret, body)))
        return requests

    # -- HTTP ------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        return [
            Route("/log_entries", self._endpoint(self._log_entries)),
            Route("/webhook_subscriptions", self._endpoint(self._subscriptions)),
            Route("/webhook_subscriptions/{id}", self._endpoint(self._subscription)),
        ]

    @staticmethod
    def _error(status: int, message: str, code: int, headers: Any = None) -> Response:
        body = {"error": {"message": message, "code": code}}
        return JSONResponse(body, status_code=status, headers=headers)

    def _fault_response(self, status: int, retry_after: float | None) -> Response:
        headers = {"Retry-After": _retry_after(retry_after)} if retry_after is not None else None
        if status == 429:
            return self._error(429, "Rate Limit Exceeded", 2020, headers)
        if status >= 500:
            return self._error(status, "Internal Server Error", 2000, headers)
        return self._error(status, "Forbidden", 2010, headers)

    async def _check_auth(self, request: Request) -> Response | None:
        scheme, _, rest = request.headers.get("authorization", "").partition(" ")
        token = rest.removeprefix("token=") if rest.startswith("token=") else None
        if scheme != "Token" or token is None:
            return self._error(401, "Unauthorized", 2006)
        if not hmac.compare_digest(token.encode(), self.api_key.encode()):
            return self._error(401, "Unauthorized", 2006)
        return None

    async def _log_entries(self, request: Request) -> Response:
        q = request.query_params
        self.queries.append({k: q.getlist(k) if k.endswith("[]") else q[k] for k in q})
        try:
            limit = min(int(q.get("limit", "25")), PD_MAX_LIMIT)
            offset = int(q.get("offset", "0"))
        except ValueError:
            return self._error(400, "Invalid Input Provided", 2001)
        if offset + limit > PD_MAX_OFFSET_END:
            return self._error(400, "Offset must be less than 10000", 2001)
        now = self.now()
        since = _when(q.get("since")) if q.get("since") else now - 30 * 86_400
        until = _when(q.get("until")) if q.get("until") else now
        if since is None or until is None:
            return self._error(400, "Invalid Input Provided", 2001)
        teams = set(q.getlist("team_ids[]"))
        overview = q.get("is_overview") == "true"
        include = set(q.getlist("include[]"))
        chosen = []
        for entry in self.log_entries:
            when = _when(entry["created_at"]) or 0.0
            if not since <= when < until or when > now:
                continue
            if overview and entry["type"] == "notify_log_entry":
                continue
            if teams and not teams & {t["id"] for t in entry["teams"]}:
                continue
            chosen.append(entry)
        # Newest first, as PagerDuty lists the log.
        chosen.sort(key=lambda e: (_when(e["created_at"]) or 0.0, e["id"]), reverse=True)
        page = chosen[offset : offset + limit]
        if "incidents" in include:
            page = [dict(e, incident=self.incidents[e["incident"]["id"]]) for e in page]
        return JSONResponse(
            {
                "log_entries": page,
                "limit": limit,
                "offset": offset,
                "more": offset + limit < len(chosen),
                "total": len(chosen) if q.get("total") == "true" else None,
            }
        )

    async def _subscriptions(self, request: Request) -> Response:
        q = request.query_params
        limit = min(int(q.get("limit", "25")), PD_MAX_LIMIT)
        offset = int(q.get("offset", "0"))
        page = self.subscriptions[offset : offset + limit]
        return JSONResponse(
            {
                "webhook_subscriptions": page,
                "limit": limit,
                "offset": offset,
                "total": None,
                "more": offset + limit < len(self.subscriptions),
            }
        )

    async def _subscription(self, request: Request) -> Response:
        wanted = request.path_params["id"]
        for subscription in self.subscriptions:
            if subscription["id"] == wanted:
                return JSONResponse({"webhook_subscription": subscription})
        return self._error(404, "Not Found", 2100)


# ---------------------------------------------------------------------------------
# Twilio
# ---------------------------------------------------------------------------------


class TwilioEmulator(_Emulator):
    """One Twilio account's messages and calls, and their status callbacks (signed for
    ``public_url``, where the source says Twilio posts them)."""

    def __init__(
        self,
        account_sid: str,
        auth_token: str,
        public_url: str,
        *,
        numbers: tuple[str, ...] = ("+15017122661",),
        fail_every: int = 7,
        inbound_every: int = 5,
        api_key: tuple[str, str] | None = None,
    ) -> None:
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.api_key = api_key
        self.public_url = public_url
        self.numbers = numbers
        self.fail_every = fail_every
        self.inbound_every = inbound_every
        self.messages: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        # (key, parameters) of each status callback, in the order they were posted.
        self.callbacks: list[tuple[str, list[tuple[str, str]]]] = []
        self.queries: list[dict[str, str]] = []
        self._serial = itertools.count(1)
        super().__init__()

    def sid(self, prefix: str) -> str:
        return prefix + f"{next(self._serial):08x}" + secrets.token_hex(12)

    def _base(self, sid: str, kind: str) -> dict[str, Any]:
        return {
            "account_sid": self.account_sid,
            "api_version": "2010-04-01",
            "sid": sid,
            "uri": f"/2010-04-01/Accounts/{self.account_sid}/{kind}/{sid}.json",
        }

    def add_message(
        self, at: float, sender: str | None = None, stuck: str | None = None
    ) -> str | None:
        """A message created and sent at ``at`` and updated to its final status a few
        seconds later; returns the key of its final status callback (None for an
        inbound one, which posts none). ``stuck``: an outbound message still in that
        status (``queued``, ``sending``), whose callbacks so far are not sent."""
        number = len(self.messages) + 1
        sid = self.sid("SM")
        inbound = stuck is None and number % self.inbound_every == 0
        failed = not inbound and stuck is None and number % self.fail_every == 0
        status = "received" if inbound else ("undelivered" if failed else "delivered")
        status = stuck or status
        sender = sender or self.numbers[(number - 1) % len(self.numbers)]
        to = f"+1555{number:07d}"
        message: dict[str, Any] = self._base(sid, "Messages") | {
            "body": f"Message {number}",
            "date_created": _rfc2822(at),
            "date_sent": _rfc2822(at),
            "date_updated": _rfc2822(at + 3),
            "direction": "inbound" if inbound else "outbound-api",
            "error_code": 30003 if failed else None,
            "error_message": "Unreachable destination handset" if failed else None,
            "from": to if inbound else sender,
            "messaging_service_sid": None,
            "num_media": "0",
            "num_segments": "1",
            "price": None if inbound else "-0.00750",
            "price_unit": "USD",
            "status": status,
            "subresource_uris": {
                "media": f"/2010-04-01/Accounts/{self.account_sid}/Messages/{sid}/Media.json"
            },
            "to": sender if inbound else to,
        }
        self.messages.append(message)
        if inbound or stuck:
            return None
        for shown in ("sent", status):
            params = [
                ("SmsSid", sid),
                ("SmsStatus", shown),
                ("MessageStatus", shown),
                ("To", message["to"]),
                ("MessageSid", sid),
                ("AccountSid", self.account_sid),
                ("From", message["from"]),
                ("ApiVersion", "2010-04-01"),
            ]
            if shown == "undelivered":
                params.append(("ErrorCode", "30003"))
            if shown != "sent":
                done = datetime.fromtimestamp(at + 3, UTC).strftime("%y%m%d%H%M")
                params.append(("RawDlrDoneDate", done))
            self.callbacks.append((message_key(sid, shown), params))
        return message_key(sid, status)

    def add_call(self, at: float, duration: int = 42) -> str:
        """A call started at ``at`` and completed ``duration`` seconds later; returns
        the key of its ``completed`` status callback."""
        number = len(self.calls) + 1
        sid = self.sid("CA")
        call: dict[str, Any] = self._base(sid, "Calls") | {
            "answered_by": None,
            "caller_name": None,
            "date_created": _rfc2822(at),
            "date_updated": _rfc2822(at + duration),
            "direction": "outbound-api",
            "duration": str(duration),
            "end_time": _rfc2822(at + duration),
            "forwarded_from": None,
            "from": self.numbers[0],
            "from_formatted": self.numbers[0],
            "group_sid": None,
            "parent_call_sid": None,
            "phone_number_sid": "PN" + "0" * 32,
            "price": "-0.0200",
            "price_unit": "USD",
            "queue_time": "0",
            "start_time": _rfc2822(at),
            "status": "completed",
            "subresource_uris": {
                "recordings": f"/2010-04-01/Accounts/{self.account_sid}/Calls/{sid}/Recordings.json"
            },
            "to": f"+1555{number:07d}",
            "to_formatted": f"(555) {number:07d}",
            "trunk_sid": None,
        }
        self.calls.append(call)
        params = [
            ("Called", call["to"]),
            ("ToState", "CA"),
            ("CallerCountry", "US"),
            ("Direction", "outbound-api"),
            ("Timestamp", call["end_time"]),
            ("CallbackSource", "call-progress-events"),
            ("SipResponseCode", "200"),
            ("CallStatus", "completed"),
            ("From", call["from"]),
            ("CallSid", sid),
            ("To", call["to"]),
            ("SequenceNumber", "0"),
            ("CallDuration", str(duration)),
            ("AccountSid", self.account_sid),
            ("ApiVersion", "2010-04-01"),
        ]
        key = call_key(sid, "completed")
        self.callbacks.append((key, params))
        return key

    def add_events(self, n: int, start: float, step_s: float) -> list[str]:
        """``n`` messages at ``start``, ``start + step_s``, ...; returns the keys of
        their final status callbacks (inbound ones have none)."""
        keys = [self.add_message(start + i * step_s) for i in range(n)]
        return [k for k in keys if k is not None]

    def final_keys(self) -> set[str]:
        """The keys of the callbacks whose status the lists show now."""
        shown = {message_key(m["sid"], m["status"]) for m in self.messages}
        return shown | {call_key(c["sid"], c["status"]) for c in self.calls}

    def webhook_keys(self) -> list[str]:
        """The keys hookd stores the status callbacks under, one per callback."""
        return [key for key, _ in self.callbacks]

    # -- webhooks ------------------------------------------------------------------
    def _webhook_requests(self, secret: str) -> list[WebhookRequest]:
        requests = []
        for key, params in self.callbacks:
            headers = {
                "X-Twilio-Signature": twilio_signature(secret, self.public_url, params),
                "I-Twilio-Idempotency-Token": secrets.token_hex(18),
                "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
                "User-Agent": "TwilioProxy/1.1",
            }
            requests.append((key, urlencode(params).encode("ascii"), headers))
        return requests

    # -- HTTP ------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        prefix = "/2010-04-01/Accounts/{account}"
        return [
            Route(f"{prefix}/Messages.json", self._endpoint(self._messages)),
            Route(f"{prefix}/Calls.json", self._endpoint(self._calls)),
        ]

    @staticmethod
    def _error(status: int, code: int, message: str, headers: Any = None) -> Response:
        body = {
            "code": code,
            "message": message,
            "more_info": f"https://www.twilio.com/docs/errors/{code}",
            "status": status,
        }
        return JSONResponse(body, status_code=status, headers=headers)

    def _fault_response(self, status: int, retry_after: float | None) -> Response:
        headers = {"Retry-After": _retry_after(retry_after)} if retry_after is not None else None
        if status == 429:
            return self._error(429, 20429, "Too Many Requests", headers)
        if status >= 500:
            return self._error(status, 20500, "Internal Server Error", headers)
        return self._error(status, 20003, "Authenticate", headers)

    async def _check_auth(self, request: Request) -> Response | None:
        scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
        try:
            user, _, password = base64.b64decode(encoded).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return self._error(401, 20003, "Authenticate")
        allowed = [(self.account_sid, self.auth_token)]
        if self.api_key is not None:
            allowed.append(self.api_key)
        good = scheme == "Basic" and any(
            hmac.compare_digest(user.encode(), u.encode())
            and hmac.compare_digest(password.encode(), p.encode())
            for u, p in allowed
        )
        if not good:
            return self._error(401, 20003, "Authenticate")
        if request.path_params["account"] != self.account_sid:
            return self._error(403, 20004, "Forbidden")
        return None

    async def _messages(self, request: Request) -> Response:
        return self._list(request, "messages", self.messages, "DateSent", "date_sent")

    async def _calls(self, request: Request) -> Response:
        return self._list(request, "calls", self.calls, "StartTime", "start_time")

    def _list(
        self,
        request: Request,
        key: str,
        records: list[dict[str, Any]],
        filter_name: str,
        field: str,
    ) -> Response:
        q = request.query_params
        self.queries.append(dict(q))
        try:
            size = min(int(q.get("PageSize", "50")), TWILIO_MAX_PAGE)
            page_number = int(q.get("Page", "0"))
        except ValueError:
            return self._error(400, 20001, "Invalid PageSize")
        after = _twilio_time(q.get(f"{filter_name}>"))
        before = _twilio_time(q.get(f"{filter_name}<"))
        now = self.now()
        chosen = []
        for record in records:
            when = _twilio_time(record.get(field))
            created = _twilio_time(record["date_created"]) or 0.0
            if created > now:
                continue
            if after is not None and (when is None or when < after):
                continue
            if before is not None and (when is None or when > before):
                continue
            if q.get("From") and record["from"] != q["From"]:
                continue
            if q.get("To") and record["to"] != q["To"]:
                continue
            if q.get("Status") and record["status"] != q["Status"]:
                continue
            chosen.append(record)
        # Newest first (date_created, then SID).
        chosen.sort(key=lambda r: (_twilio_time(r["date_created"]) or 0.0, r["sid"]), reverse=True)
        start = 0
        token = q.get("PageToken")
        if token:
            last = token.removeprefix("PA")
            start = next((i + 1 for i, r in enumerate(chosen) if r["sid"] == last), len(chosen))
        page = chosen[start : start + size]
        path = request.url.path
        kept = [(k, v) for k, v in q.multi_items() if k not in {"Page", "PageToken", "PageSize"}]
        following = None
        if start + size < len(chosen) and page:
            query = [
                *kept,
                ("PageSize", str(size)),
                ("Page", str(page_number + 1)),
                ("PageToken", "PA" + page[-1]["sid"]),
            ]
            following = f"{path}?{urlencode(query)}"
        first = f"{path}?{urlencode([*kept, ('PageSize', str(size)), ('Page', '0')])}"
        return JSONResponse(
            {
                key: page,
                "end": start + len(page) - 1 if page else 0,
                "first_page_uri": first,
                "next_page_uri": following,
                "page": page_number,
                "page_size": size,
                "previous_page_uri": None,
                "start": start,
                "uri": f"{path}?{request.url.query}",
            }
        )
