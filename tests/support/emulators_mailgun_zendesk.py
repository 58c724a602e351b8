"""In-memory emulators of the Mailgun and Zendesk APIs hookd reconciles against.

Built like the emulators of ``tests.support.emulators`` (and on their shared base):
each is a small Starlette app (``.app``) answering in the documented shape of one
provider API, keeping an in-memory record of events, and able to send the matching
signed webhooks to a hookd receiver with drops, duplicates and reordering.

- :class:`MailgunEmulator`: one sending domain's events:
  ``GET /v3/{domain}/events`` (``begin``/``end`` in unix seconds or RFC 2822,
  ``ascending``, ``limit`` up to 300, ``event`` filter, a retention of
  ``retention_days``), paged through the opaque page URLs of ``paging.next`` /
  ``previous`` / ``first`` / ``last`` (``GET /v3/{domain}/events/{page}``; the last
  page is the first empty one), ``listing_lag_s`` (how long an event takes to be
  listed: Mailgun's events API is eventually consistent), and the domain's webhooks
  (``GET /v3/domains/{domain}/webhooks``); basic auth ``api:<key>``. Webhooks are
  ``{"signature": {…}, "event-data": <the listed event>}``, signed as Mailgun signs.
  Shapes after Mailgun's API reference (Events: "Query events"; the sample event
  and the paging of mailgun/mailgun-go's events.go and mock_events.go).
- :class:`ZendeskEmulator`: one webhook (``GET /api/v2/webhooks/{id}``), its
  invocations (``GET …/invocations``: ``filter[from_ts]``/``filter[to_ts]``,
  ``filter[status]``, ``sort``, ``page[size]`` up to 100, ``page[after]``/
  ``page[before]`` cursors in ``meta``, ``links``; seven days of them) and their
  attempts (``GET …/invocations/{id}/attempts``: the request sent, headers and
  body, and what the receiver answered). Auth: ``<email>/token:<token>`` (basic) or
  an OAuth bearer token. Webhooks carry the trigger's JSON payload and the
  ``X-Zendesk-Webhook-*`` headers, signed. Shapes after Zendesk's Webhooks API
  reference ("List Webhook Invocations", "List Webhook Invocation Attempts") and the
  OpenAPI description in botbrains-io/python-zendesk (openapi.yaml: the
  ``WebhookInvocation`` fields and the ``filter[status]`` values).

Common to both (from the shared base): ``api_calls``, ``calls_by_path``,
``latency_s``, ``now``, ``signing_now``, ``fail_next(status, count, retry_after)``,
``add_events(n, start, step_s)`` and ``send_webhooks(client, url, secret, drop=,
duplicate=, shuffle=)``.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import hmac
import itertools
import json
import random
import secrets
import uuid
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from hookd.providers.mailgun import mailgun_signature
from hookd.providers.zendesk import zendesk_headers
from tests.support.emulators import (
    WebhookRequest,
    _b64url,
    _b64url_decode,
    _compact,
    _Emulator,
    _retry_after,
)

DAY = 86_400
MAILGUN_MAX_LIMIT = 300
MAILGUN_DEFAULT_LIMIT = 100
ZENDESK_RETENTION_S = 7 * DAY
ZENDESK_MAX_PAGE = 100
ZENDESK_STATUSES = (
    "unknown",
    "accepted",
    "success",
    "failed",
    "timeout",
    "circuit broken",
    "throttled",
    "client error",
    "server error",
)
ZENDESK_INVOCATION_FIELDS = (
    "id",
    "webhook_id",
    "status",
    "latest_status",
    "created_at",
    "latest_completed_at",
    "attempts_count",
)


def _basic(request: Request) -> tuple[str, str] | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(credentials.strip()).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


def _same(given: str, wanted: str) -> bool:
    return hmac.compare_digest(given.encode(), wanted.encode())


def _zulu(at: float) -> str:
    """``2021-03-25T05:09:27Z``: Zendesk's times."""
    return datetime.fromtimestamp(int(at), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_zulu(text: str) -> float | None:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return None if moment.tzinfo is None else moment.timestamp()


# ---------------------------------------------------------------------------------
# Mailgun
# ---------------------------------------------------------------------------------


def _mailgun_time(text: str) -> float | None:
    """A ``begin``/``end``: unix seconds, or an RFC 2822 date."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return None


class MailgunEmulator(_Emulator):
    """The events of one Mailgun sending domain."""

    def __init__(
        self,
        api_key: str,
        domain: str = "mg.example.com",
        *,
        retention_days: float = 30.0,
        listing_lag_s: float = 0.0,
    ) -> None:
        self.api_key = api_key
        self.domain = domain
        self.retention_days = retention_days
        self.listing_lag_s = listing_lag_s
        self.events: list[dict[str, Any]] = []  # creation order
        self.webhooks: dict[str, list[str]] = {}  # webhook name -> URLs
        self.queries: list[dict[str, str]] = []  # the query of every first-page request
        super().__init__()

    # -- recording ---------------------------------------------------------------
    def add_event(self, at: float, event: str = "delivered") -> str:
        """Record one event at unix time ``at`` (a float, as Mailgun's ``timestamp``);
        returns its ``id``."""
        number = len(self.events) + 1
        recipient = f"user{number}@example.com"
        event_id = secrets.token_urlsafe(16)[:22]
        item: dict[str, Any] = {
            "id": event_id,
            "timestamp": round(at, 6),
            "log-level": "info" if event in ("delivered", "accepted", "opened") else "warn",
            "event": event,
            "envelope": {
                "transport": "smtp",
                "sender": f"bob@{self.domain}",
                "sending-ip": "209.61.154.250",
                "targets": recipient,
            },
            "flags": {
                "is-routed": False,
                "is-authenticated": True,
                "is-system-test": False,
                "is-test-mode": False,
            },
            "delivery-status": {
                "tls": True,
                "mx-host": "smtp-in.example.com",
                "code": 250,
                "description": "",
                "session-seconds": 0.43,
                "utf8": True,
                "attempt-no": 1,
                "message": "OK",
                "certificate-verified": True,
            },
            "message": {
                "headers": {
                    "to": recipient,
                    "message-id": f"20130503182626.{number}.{uuid.uuid4().hex[:8]}@{self.domain}",
                    "from": f"Bob <bob@{self.domain}>",
                    "subject": f"Test message #{number}",
                },
                "attachments": [],
                "size": 111 + number,
            },
            "recipient": recipient,
            "recipient-domain": "example.com",
            "storage": {
                "url": f"https://se.api.mailgun.net/v3/domains/{self.domain}/messages/{event_id}",
                "key": event_id,
            },
            "campaigns": [],
            "tags": [],
            "user-variables": {},
        }
        self.events.append(item)
        return event_id

    def add_events(
        self, n: int, start: float, step_s: float, event: str = "delivered"
    ) -> list[str]:
        """Record ``n`` events at ``start``, ``start + step_s``, ...; returns their ids."""
        return [self.add_event(start + i * step_s, event) for i in range(n)]

    def event(self, event_id: str) -> dict[str, Any]:
        return next(e for e in self.events if e["id"] == event_id)

    # -- webhooks ------------------------------------------------------------------
    def body(self, event: Mapping[str, Any], secret: str) -> bytes:
        """The webhook body Mailgun posts for ``event``, signed now."""
        signature = mailgun_signature(secret, str(int(self.signing_now())), secrets.token_hex(25))
        return _compact({"signature": signature, "event-data": event})

    def _webhook_requests(self, secret: str) -> list[WebhookRequest]:
        headers = {"Content-Type": "application/json", "User-Agent": "mailgun/treq-16.12.0"}
        return [(e["id"], self.body(e, secret), dict(headers)) for e in self.events]

    # -- HTTP ------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        return [
            Route("/v3/domains/{domain}/webhooks", self._endpoint(self._webhooks), methods=["GET"]),
            Route("/v3/{domain}/events", self._endpoint(self._list), methods=["GET"]),
            Route("/v3/{domain}/events/{page}", self._endpoint(self._page), methods=["GET"]),
            Route(
                "/{rest:path}",
                self._endpoint(self._not_found, authed=False),
                methods=["GET", "POST", "PUT", "DELETE"],
            ),
        ]

    @staticmethod
    def _message(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
        return JSONResponse({"message": message}, status_code=status, headers=headers)

    def _fault_response(self, status: int, retry_after: float | None) -> Response:
        headers = {"Retry-After": _retry_after(retry_after)} if retry_after is not None else None
        if status == 429:
            return self._message(429, "Too many requests", headers)
        if status >= 500:
            return self._message(status, "Internal Server Error", headers)
        return PlainTextResponse("Forbidden", status_code=status, headers=headers)

    async def _check_auth(self, request: Request) -> Response | None:
        given = _basic(request)
        if given is None or given[0] != "api" or not _same(given[1], self.api_key):
            # Mailgun answers a wrong or missing key with a bare "Forbidden".
            return PlainTextResponse("Forbidden", status_code=401)
        return None

    async def _not_found(self, _: Request) -> Response:
        return self._message(404, "Not Found")

    def listed(self) -> list[dict[str, Any]]:
        """Events the API shows now: inside the retention, and listed already."""
        now = self.now()
        oldest = now - self.retention_days * DAY
        return [e for e in self.events if oldest <= e["timestamp"] <= now - self.listing_lag_s]

    async def _webhooks(self, request: Request) -> Response:
        if request.path_params["domain"] != self.domain:
            return self._message(404, "Domain not found")
        return JSONResponse({"webhooks": {n: {"urls": u} for n, u in self.webhooks.items()}})

    async def _list(self, request: Request) -> Response:
        if request.path_params["domain"] != self.domain:
            return self._message(404, "Domain not found")
        query = request.query_params
        self.queries.append(dict(query))
        bounds: dict[str, float] = {}
        for name in ("begin", "end"):
            raw = query.get(name)
            if raw is None:
                continue
            parsed = _mailgun_time(raw)
            if parsed is None:
                return self._message(400, f"'{name}' parameter is not valid: {raw!r}")
            bounds[name] = parsed
        ascending_text = query.get("ascending")
        if ascending_text not in (None, "yes", "no"):
            return self._message(400, "'ascending' parameter must be 'yes' or 'no'")
        try:
            limit = int(query.get("limit", str(MAILGUN_DEFAULT_LIMIT)))
        except ValueError:
            return self._message(400, "'limit' parameter is not valid")
        if not 1 <= limit <= MAILGUN_MAX_LIMIT:
            return self._message(400, f"'limit' parameter must be at most {MAILGUN_MAX_LIMIT}")
        begin, end = bounds.get("begin"), bounds.get("end")
        if begin is not None and end is not None:
            ascending = begin <= end
            if ascending_text is not None and (ascending_text == "yes") != ascending:
                return self._message(400, "'ascending' contradicts 'begin' and 'end'")
        elif begin is not None:
            if ascending_text is None:
                return self._message(400, "'ascending' is required when 'end' is not given")
            ascending = ascending_text == "yes"
        else:
            ascending = ascending_text == "yes"
        state = {
            "b": begin,
            "e": end,
            "a": ascending,
            "l": limit,
            "ev": query.get("event"),
            "after": None,
        }
        return self._answer(request, state)

    async def _page(self, request: Request) -> Response:
        if request.path_params["domain"] != self.domain:
            return self._message(404, "Domain not found")
        try:
            state = json.loads(_b64url_decode(request.path_params["page"]))
        except (ValueError, binascii.Error):
            return self._message(400, "Invalid page token")
        if not isinstance(state, dict) or "a" not in state:
            return self._message(400, "Invalid page token")
        return self._answer(request, state)

    def _answer(self, request: Request, state: dict[str, Any]) -> Response:
        ascending: bool = state["a"]
        low, high = state["b"], state["e"]
        if low is not None and high is not None and low > high:
            low, high = high, low
        elif not ascending and low is not None and high is None:
            low, high = None, low  # descending from begin
        candidates = [
            e
            for e in self.listed()
            if (low is None or e["timestamp"] >= low)
            and (high is None or e["timestamp"] <= high)
            and (state["ev"] is None or e["event"] == state["ev"])
        ]
        candidates.sort(key=lambda e: (e["timestamp"], e["id"]), reverse=not ascending)
        after = state["after"]
        if after is not None:
            mark = (after[0], after[1])
            candidates = [
                e
                for e in candidates
                if (
                    (e["timestamp"], e["id"]) > mark
                    if ascending
                    else (e["timestamp"], e["id"]) < mark
                )
            ]
        page = candidates[: state["l"]]
        base = f"{str(request.base_url).rstrip('/')}/v3/{self.domain}/events"

        def link(changes: dict[str, Any]) -> str:
            return f"{base}/{_b64url(_compact({**state, **changes}))}"

        last = page[-1] if page else None
        following = [last["timestamp"], last["id"]] if last is not None else after
        first = page[0] if page else None
        return JSONResponse(
            {
                "items": page,
                "paging": {
                    "first": link({"after": None}),
                    "last": link({"after": None, "a": not ascending}),
                    "next": link({"after": following}),
                    "previous": link(
                        {
                            "a": not ascending,
                            "after": [first["timestamp"], first["id"]] if first else after,
                        }
                    ),
                },
            }
        )


# ---------------------------------------------------------------------------------
# Zendesk
# ---------------------------------------------------------------------------------


class ZendeskEmulator(_Emulator):
    """One Zendesk webhook connected to a trigger: its invocations and their attempts.

    ``email`` set: the token is an API token (basic ``<email>/token:<token>``);
    ``None``: an OAuth access token (``Bearer``). ``subscriptions``: the webhook's
    (``conditional_ticket_events`` for one connected to triggers or automations)."""

    def __init__(
        self,
        token: str,
        email: str | None = "admin@example.com",
        *,
        webhook_id: str = "01GB2G9R1Q0B1QJQXAJX2HRT5C",
        endpoint: str = "https://hookd.example/hooks/zendesk",
        subscriptions: tuple[str, ...] = ("conditional_ticket_events",),
    ) -> None:
        self.token = token
        self.email = email
        self.webhook_id = webhook_id
        self.webhook: dict[str, Any] = {
            "id": webhook_id,
            "name": "hookd",
            "status": "active",
            "subscriptions": list(subscriptions),
            "created_at": "2024-01-05T10:00:00Z",
            "created_by": "1900000000001",
            "endpoint": endpoint,
            "http_method": "POST",
            "request_format": "json",
            "updated_at": "2024-01-05T10:00:00Z",
            "updated_by": "1900000000001",
        }
        self.invocations: list[dict[str, Any]] = []  # creation order
        self.attempts: dict[str, list[dict[str, Any]]] = {}  # invocation id -> attempts
        self.bodies: dict[str, bytes] = {}  # invocation id -> the body Zendesk sends
        self.queries: list[dict[str, str]] = []
        self._ids = itertools.count(8_000_000_001)
        super().__init__()

    # -- recording ---------------------------------------------------------------
    def add_invocation(self, at: float, *, logged: bool = True) -> str:
        """Record one invocation at unix time ``at`` (its trigger fired) with its first
        attempt not yet made; returns its id. ``logged``: whether its attempts will
        show the request body."""
        invocation_id = str(next(self._ids))
        ticket = 35_436 + len(self.invocations)
        body = _compact(
            {
                "ticket": {
                    "id": ticket,
                    "title": f"Help, my printer is on fire #{ticket}",
                    "status": "open",
                    "priority": "urgent",
                    "requester": {"email": f"customer{ticket}@example.com"},
                    "updated_at": _zulu(at),
                },
                "trigger": "Notify hookd of ticket updates",
            }
        )
        self.invocations.append(
            {
                "id": invocation_id,
                "webhook_id": self.webhook_id,
                "status": "accepted",
                "latest_status": None,
                "created_at": _zulu(at),
                "latest_completed_at": None,
                "attempts_count": 0,
                "_at": at,
                "_logged": logged,
            }
        )
        self.attempts[invocation_id] = []
        self.bodies[invocation_id] = body
        return invocation_id

    def add_events(self, n: int, start: float, step_s: float, *, logged: bool = True) -> list[str]:
        """Record ``n`` invocations at ``start``, ``start + step_s``, ...; returns their
        dedupe keys (``invocation:<id>``, as hookd stores them)."""
        return [
            f"invocation:{self.add_invocation(start + i * step_s, logged=logged)}" for i in range(n)
        ]

    def invocation(self, invocation_id: str) -> dict[str, Any]:
        return next(i for i in self.invocations if i["id"] == invocation_id)

    def _headers(self, invocation_id: str, secret: str) -> dict[str, str]:
        return zendesk_headers(
            secret,
            self.bodies[invocation_id],
            int(self.signing_now()),
            webhook_id=self.webhook_id,
            invocation_id=invocation_id,
        )

    def attempted(self, invocation_id: str, status: int | None, headers: Mapping[str, str]) -> None:
        """Log an attempt of ``invocation_id``: what was sent, and the receiver's
        answer (``None``: no answer, a timeout)."""
        invocation = self.invocation(invocation_id)
        now = self.now()
        number = len(self.attempts[invocation_id]) + 1
        ok = status is not None and 200 <= status < 300
        kind = (
            "success"
            if ok
            else "timeout"
            if status is None
            else ("client error" if status < 500 else "server error")
        )
        request: dict[str, Any] = {"headers": dict(headers)}
        if invocation["_logged"]:
            request["payload"] = self.bodies[invocation_id].decode()
        self.attempts[invocation_id].append(
            {
                "id": f"{invocation_id}-{number}",
                "invocation_id": invocation_id,
                "status": kind,
                "completed_at": _zulu(now),
                "request": request,
                "response": {
                    "status": status,
                    "headers": {"Content-Type": "application/json"} if status else {},
                    "payload": "{}" if status else "",
                },
            }
        )
        invocation.update(
            status="success" if ok else "failed",
            latest_status=status,
            latest_completed_at=_zulu(now),
            attempts_count=number,
        )

    # -- webhooks ------------------------------------------------------------------
    def _webhook_requests(self, secret: str) -> list[WebhookRequest]:
        return [
            (f"invocation:{i['id']}", self.bodies[i["id"]], self._headers(i["id"], secret))
            for i in self.invocations
        ]

    def _logged_headers(self, invocation_id: str) -> dict[str, str]:
        """The headers an attempt's log shows (the signature left out: the log is
        written without the secret)."""
        sent = self._headers(invocation_id, "unknown-to-the-log")
        return {k: v for k, v in sent.items() if k != "X-Zendesk-Webhook-Signature"}

    def _sent(self, key: str, status: int) -> None:
        invocation_id = key.removeprefix("invocation:")
        self.attempted(invocation_id, status, self._logged_headers(invocation_id))

    async def send_webhooks(
        self,
        client: httpx.AsyncClient,
        url: str,
        secret: str,
        *,
        drop: Collection[str] = frozenset(),
        duplicate: Collection[str] = frozenset(),
        shuffle: random.Random | None = None,
    ) -> dict[str, int]:
        """As the base method, keyed by ``invocation:<id>``; each invocation logs its
        attempt and the answer, a dropped one an attempt that got none (a timeout)."""
        statuses = await super().send_webhooks(
            client, url, secret, drop=drop, duplicate=duplicate, shuffle=shuffle
        )
        for key in drop:
            invocation_id = key.removeprefix("invocation:")
            self.attempted(invocation_id, None, self._logged_headers(invocation_id))
        return statuses

    # -- HTTP ------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        return [
            Route("/api/v2/webhooks/{webhook_id}", self._endpoint(self._get), methods=["GET"]),
            Route(
                "/api/v2/webhooks/{webhook_id}/invocations",
                self._endpoint(self._list),
                methods=["GET"],
            ),
            Route(
                "/api/v2/webhooks/{webhook_id}/invocations/{invocation_id}/attempts",
                self._endpoint(self._attempts),
                methods=["GET"],
            ),
            Route(
                "/{rest:path}",
                self._endpoint(self._not_found, authed=False),
                methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            ),
        ]

    @staticmethod
    def _errors(status: int, code: str, title: str, detail: str | None = None) -> Response:
        error: dict[str, Any] = {"code": code, "title": title}
        if detail is not None:
            error["detail"] = detail
        return JSONResponse({"errors": [error]}, status_code=status)

    def _fault_response(self, status: int, retry_after: float | None) -> Response:
        headers = {"Retry-After": _retry_after(retry_after)} if retry_after is not None else None
        if status == 429:
            return JSONResponse(
                {
                    "error": "APIRateLimitExceeded",
                    "description": "Number of allowed API requests per minute exceeded",
                },
                status_code=429,
                headers=headers,
            )
        if status >= 500:
            return JSONResponse(
                {"error": "InternalError", "description": "Something went wrong"},
                status_code=status,
                headers=headers,
            )
        return JSONResponse({"error": "Forbidden"}, status_code=status, headers=headers)

    async def _check_auth(self, request: Request) -> Response | None:
        refused = JSONResponse({"error": "Couldn't authenticate you"}, status_code=401)
        if self.email is None:
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            ok = scheme.lower() == "bearer" and _same(given.strip(), self.token)
            return None if ok else refused
        basic = _basic(request)
        if basic is None:
            return refused
        user, password = basic
        if not (_same(user, f"{self.email}/token") and _same(password, self.token)):
            return refused
        return None

    async def _not_found(self, _: Request) -> Response:
        return JSONResponse(
            {"error": "InvalidEndpoint", "description": "Not found"}, status_code=404
        )

    def _ours(self, request: Request) -> bool:
        return bool(request.path_params["webhook_id"] == self.webhook_id)

    async def _get(self, request: Request) -> Response:
        if not self._ours(request):
            return self._errors(404, "WebhookNotFound", "Webhook not found")
        return JSONResponse({"webhook": self.webhook})

    def listed(self) -> list[dict[str, Any]]:
        """Invocations of the past seven days, oldest first."""
        oldest = self.now() - ZENDESK_RETENTION_S
        return [i for i in self.invocations if i["_at"] >= oldest]

    @staticmethod
    def shown(invocation: Mapping[str, Any]) -> dict[str, Any]:
        return {f: invocation[f] for f in ZENDESK_INVOCATION_FIELDS}

    async def _list(self, request: Request) -> Response:
        if not self._ours(request):
            return self._errors(404, "WebhookNotFound", "Webhook not found")
        query = request.query_params
        self.queries.append(dict(query))
        bounds: dict[str, float] = {}
        for name in ("filter[from_ts]", "filter[to_ts]"):
            raw = query.get(name)
            if raw is None:
                continue
            parsed = _parse_zulu(raw)
            if parsed is None:
                return self._errors(400, "InvalidParameter", f"{name} is invalid", raw)
            bounds[name] = parsed
        status = query.get("filter[status]")
        if status is not None and status not in ZENDESK_STATUSES:
            return self._errors(400, "InvalidParameter", "filter[status] is invalid", status)
        try:
            size = int(query.get("page[size]", str(ZENDESK_MAX_PAGE)))
        except ValueError:
            return self._errors(400, "InvalidPaginationParameter", "page[size] is invalid")
        if not 1 <= size <= ZENDESK_MAX_PAGE:
            return self._errors(
                400, "InvalidPaginationParameter", f"page[size] must be 1 to {ZENDESK_MAX_PAGE}"
            )
        sort = query.get("sort")
        if sort not in (None, "latest_completed_at", "-latest_completed_at"):
            return self._errors(400, "InvalidParameter", "sort is invalid", sort)
        chosen = [
            i
            for i in self.listed()
            if ("filter[from_ts]" not in bounds or int(i["_at"]) >= bounds["filter[from_ts]"])
            and ("filter[to_ts]" not in bounds or int(i["_at"]) <= bounds["filter[to_ts]"])
            and (status is None or i["status"] == status)
        ]
        if sort is None:
            chosen.sort(key=lambda i: (i["_at"], i["id"]), reverse=True)
        else:
            chosen.sort(key=lambda i: i["latest_completed_at"] or "", reverse=sort.startswith("-"))
        order = [i["id"] for i in chosen]
        start = 0
        after, before = query.get("page[after]"), query.get("page[before]")
        cursor = after or before
        if cursor:
            try:
                mark = json.loads(_b64url_decode(cursor))["id"]
                at = order.index(mark)
            except (ValueError, KeyError, TypeError, binascii.Error):
                return self._errors(400, "InvalidPaginationParameter", "cursor is invalid")
            start = at + 1 if after else max(0, at - size)
        page = chosen[start : start + size]
        has_more = start + size < len(chosen)

        def token(invocation: Mapping[str, Any] | None) -> str | None:
            return None if invocation is None else _b64url(_compact({"id": invocation["id"]}))

        after_cursor = token(page[-1] if page else None)
        before_cursor = token(page[0] if page else None)
        base = f"{str(request.base_url).rstrip('/')}/api/v2/webhooks/{self.webhook_id}/invocations"
        kept = {k: v for k, v in query.items() if k not in ("page[after]", "page[before]")}
        links = {
            "next": f"{base}?{urlencode({**kept, 'page[after]': after_cursor})}"
            if has_more and after_cursor
            else None,
            "prev": f"{base}?{urlencode({**kept, 'page[before]': before_cursor})}"
            if start > 0 and before_cursor
            else None,
        }
        return JSONResponse(
            {
                "invocations": [self.shown(i) for i in page],
                "meta": {
                    "has_more": has_more,
                    "after_cursor": after_cursor,
                    "before_cursor": before_cursor,
                },
                "links": links,
            }
        )

    async def _attempts(self, request: Request) -> Response:
        if not self._ours(request):
            return self._errors(404, "WebhookNotFound", "Webhook not found")
        wanted = request.path_params["invocation_id"]
        if wanted not in {i["id"] for i in self.listed()}:
            return self._errors(404, "InvocationNotFound", "Invocation not found")
        return JSONResponse({"attempts": self.attempts[wanted]})


# ---------------------------------------------------------------------------------


def webhook_key(headers: Mapping[str, str], body: bytes) -> str:
    """The key hookd dedupes a received emulator webhook on: the Mailgun
    ``event-data.id``, or ``invocation:<X-Zendesk-Webhook-Invocation-Id>``."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if "x-zendesk-webhook-invocation-id" in lowered:
        return f"invocation:{lowered['x-zendesk-webhook-invocation-id']}"
    return str(json.loads(body)["event-data"]["id"])
