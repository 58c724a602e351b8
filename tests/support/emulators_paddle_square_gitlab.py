"""In-memory emulators of the Paddle, Square and GitLab APIs hookd reconciles against.

Built like the emulators of ``tests.support.emulators`` (and on their shared base):
each is a small Starlette app (``.app``) answering in the documented shape of one
provider API, keeping an in-memory record of events, and able to send the matching
signed webhooks to a hookd receiver with drops, duplicates and reordering.

- :class:`PaddleEmulator`: Paddle Billing notifications of a notification
  destination: ``GET /notifications`` (``after``/``per_page``/``order_by``,
  ``notification_setting_id``, ``status``, ``from``/``to``, 90-day retention),
  ``GET /notifications/{id}``, ``POST /notifications/{id}/replay``; webhooks signed
  ``Paddle-Signature: ts=…;h1=…``.
- :class:`SquareEmulator`: the Events API: ``POST /v2/events`` (Search events:
  ``query.filter`` by type, merchant, location and ``created_at`` range,
  ``query.sort``, ``cursor`` tied to the original query, 28-day retention),
  ``PUT /v2/events/enable|disable``; webhooks signed
  ``x-square-hmacsha256-signature`` over the notification URL and the body.
- :class:`GitLabEmulator`: one project webhook's events:
  ``GET /projects/:id/hooks/:hook_id/events`` (``page``/``per_page`` up to 20,
  ``status``, the past seven days, e-mail addresses redacted as GitLab logs them)
  and ``POST …/events/:hook_event_id/resend`` (five a minute, sent at once);
  webhooks carry ``X-Gitlab-Token`` and ``Idempotency-Key``.

Common to all three (from the shared base): ``api_calls``, ``calls_by_path``,
``latency_s``, ``now``, ``signing_now``, ``fail_next(status, count, retry_after)``,
``add_events(n, start, step_s)`` and ``send_webhooks(client, url, secret, drop=,
duplicate=, shuffle=)``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import itertools
import json
import math
import random
import re
import secrets
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hookd.providers.gitlab import gitlab_headers
from hookd.providers.paddle import paddle_headers
from hookd.providers.square import square_signature
from tests.support.emulators import WebhookRequest, _bearer, _compact, _Emulator, _retry_after

DAY = 86_400
PADDLE_RETENTION_S = 90 * DAY
SQUARE_RETENTION_S = 28 * DAY
GITLAB_RECENT_DAYS = 7
PADDLE_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
PADDLE_STATUSES = ("not_attempted", "needs_retry", "delivered", "failed")
PADDLE_FIELDS = (
    "id",
    "type",
    "status",
    "payload",
    "occurred_at",
    "delivered_at",
    "replayed_at",
    "origin",
    "last_attempt_at",
    "retry_at",
    "times_attempted",
    "notification_setting_id",
)
GITLAB_LOG_FIELDS = (
    "id",
    "url",
    "trigger",
    "request_headers",
    "request_data",
    "response_headers",
    "response_body",
    "execution_duration",
    "response_status",
    "created_at",
)
GITLAB_INTERNAL_ERROR = "internal error"
GITLAB_REDACTED = "[REDACTED]"
EMAIL = re.compile(r"\A[^@\s]+@[^@\s]+\.[^@\s]+\Z")


def _utc_micro(at: float) -> str:
    """``2023-08-21T11:57:47.390028Z``: Paddle's and Square's times."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utc_milli(at: float) -> str:
    """``2024-05-26T03:03:17.123Z``: GitLab's API times."""
    moment = datetime.fromtimestamp(at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _parse_time(text: str) -> float | None:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return moment.timestamp()


def _parse_utc(text: object) -> float | None:
    """A time Square writes, one without a zone being UTC (its own example has one)."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _request_id() -> str:
    return str(uuid.uuid4())


# ---------------------------------------------------------------------------------
# Paddle
# ---------------------------------------------------------------------------------


class PaddleEmulator(_Emulator):
    """Notifications of Paddle Billing events for notification destinations.

    ``setting_id`` is the destination hookd is; ``other_setting_id`` a second one
    (an e-mail destination, say) that gets a notification of its own for every
    ``other_every``-th event, so that the ``notification_setting_id`` filter matters.
    """

    def __init__(
        self,
        api_key: str,
        setting_id: str | None = None,
        *,
        other_setting_id: str | None = None,
        other_every: int = 3,
    ) -> None:
        self.api_key = api_key
        self._serial = itertools.count(1)
        self.setting_id = setting_id or self.new_id("ntfset")
        self.other_setting_id = other_setting_id or self.new_id("ntfset")
        self.other_every = other_every
        self.notifications: list[dict[str, Any]] = []  # creation order (= ID order)
        self.events: dict[str, dict[str, Any]] = {}  # event_id -> event entity
        self.webhook_target: tuple[str, str] | None = None  # (url, secret) for replays
        self.replay_statuses: list[tuple[str, int]] = []  # (event_id, status) per replay
        self.queries: list[dict[str, str]] = []  # the query of every list request
        super().__init__()

    # -- IDs and recording -------------------------------------------------------
    def new_id(self, prefix: str) -> str:
        """``ntf_01h8…``: 26 Crockford base32 characters, in creation order (the
        milliseconds, then a serial, then random bits), as Paddle's IDs sort."""
        number = (int(time.time() * 1000) << 80) | (next(self._serial) << 40)
        number |= secrets.randbits(40)
        digits = []
        for _ in range(26):
            number, digit = divmod(number, 32)
            digits.append(PADDLE_ALPHABET[digit])
        return f"{prefix}_{''.join(reversed(digits))}"

    def add_event(
        self, at: float, type: str = "transaction.completed", data: dict[str, Any] | None = None
    ) -> str:
        """Record one event at unix time ``at`` and its notification for the
        destination (and, every ``other_every``-th, for the other one); returns the
        event ID."""
        event_id = self.new_id("evt")
        when = _utc_micro(at)
        number = len(self.events) + 1
        if data is None and type.startswith("customer."):
            data = {
                "id": self.new_id("ctm"),
                "name": f"Customer {number}",
                "email": f"customer{number}@example.com",
                "marketing_consent": False,
                "status": "active",
                "custom_data": None,
                "locale": "en",
                "created_at": when,
                "updated_at": when,
                "import_meta": None,
            }
        if data is None:
            data = {
                "id": self.new_id("txn"),
                "status": "completed",
                "customer_id": self.new_id("ctm"),
                "currency_code": "USD",
                "origin": "web",
                "collection_mode": "automatic",
                "items": [{"price_id": "pri_01gsz8x8sawmvhz1pv30nge1ke", "quantity": number}],
                "details": {
                    "totals": {"subtotal": str(1000 * number), "total": str(1000 * number)}
                },
                "created_at": when,
                "updated_at": when,
            }
        event = {"event_id": event_id, "event_type": type, "occurred_at": when, "data": data}
        self.events[event_id] = event
        self._notify(event, self.setting_id, "event")
        if self.other_every and len(self.events) % self.other_every == 0:
            self._notify(event, self.other_setting_id, "event")
        return event_id

    def add_events(
        self, n: int, start: float, step_s: float, type: str = "transaction.completed"
    ) -> list[str]:
        """Record ``n`` events at ``start``, ``start + step_s``, ...; returns their IDs."""
        return [self.add_event(start + i * step_s, type) for i in range(n)]

    def _notify(self, event: Mapping[str, Any], setting_id: str, origin: str) -> dict[str, Any]:
        notification_id = self.new_id("ntf")
        notification: dict[str, Any] = {
            "id": notification_id,
            "type": event["event_type"],
            "status": "not_attempted",
            "payload": {
                "data": event["data"],
                "event_id": event["event_id"],
                "event_type": event["event_type"],
                "occurred_at": event["occurred_at"],
                "notification_id": notification_id,
            },
            "occurred_at": event["occurred_at"],
            "delivered_at": None,
            "replayed_at": None,
            "origin": origin,
            "last_attempt_at": None,
            "retry_at": None,
            "times_attempted": 0,
            "notification_setting_id": setting_id,
        }
        self.notifications.append(notification)
        return notification

    def notification(self, notification_id: str) -> dict[str, Any]:
        for n in self.notifications:
            if n["id"] == notification_id:
                return n
        raise KeyError(notification_id)

    def notifications_for(self, event_id: str) -> list[dict[str, Any]]:
        """Every notification (any destination, any origin) of one event, oldest first."""
        return [n for n in self.notifications if n["payload"]["event_id"] == event_id]

    def _original(self, event_id: str) -> dict[str, Any]:
        return next(
            n
            for n in self.notifications_for(event_id)
            if n["origin"] == "event" and n["notification_setting_id"] == self.setting_id
        )

    @staticmethod
    def body(notification: Mapping[str, Any]) -> bytes:
        """The webhook body Paddle posts for a notification: its payload."""
        return _compact(notification["payload"])

    def _signed(self, notification: Mapping[str, Any], secret: str) -> tuple[bytes, dict[str, str]]:
        body = self.body(notification)
        return body, paddle_headers(secret, body, int(self.signing_now()))

    # -- webhooks ------------------------------------------------------------------
    def _webhook_requests(self, secret: str) -> list[WebhookRequest]:
        requests = []
        for n in self.notifications:
            if n["origin"] == "event" and n["notification_setting_id"] == self.setting_id:
                requests.append((n["payload"]["event_id"], *self._signed(n, secret)))
        return requests

    async def send_webhooks(
        self,
        client: httpx.AsyncClient,
        url: str,
        secret: str,
        *,
        drop: Collection[str] = frozenset(),
        duplicate: Collection[str] = frozenset(),
        shuffle: random.Random | None = None,
        dropped_status: str = "needs_retry",
    ) -> dict[str, int]:
        """As the base method, keyed by event ID. Each notification's status becomes
        what Paddle would show: ``delivered`` on a 2xx, ``needs_retry`` otherwise;
        a dropped one ``dropped_status`` (``needs_retry``: Paddle is still retrying,
        ``failed``: it gave up)."""
        statuses = await super().send_webhooks(
            client, url, secret, drop=drop, duplicate=duplicate, shuffle=shuffle
        )
        for event_id in drop:
            original = self._original(event_id)
            original["status"] = dropped_status
            original["times_attempted"] += 1
            original["last_attempt_at"] = _utc_micro(self.now())
            if dropped_status == "needs_retry":
                original["retry_at"] = _utc_micro(self.now() + 60)
        return statuses

    def _sent(self, key: str, status: int) -> None:
        self._attempted(self._original(key), status)

    def _attempted(self, notification: dict[str, Any], status: int) -> None:
        now = _utc_micro(self.now())
        notification["times_attempted"] += 1
        notification["last_attempt_at"] = now
        if 200 <= status < 300:
            notification.update(status="delivered", delivered_at=now, retry_at=None)
        else:
            notification.update(status="needs_retry", retry_at=_utc_micro(self.now() + 60))

    async def _deliver_replay(self, notification: dict[str, Any], url: str, secret: str) -> None:
        body, headers = self._signed(notification, secret)
        async with httpx.AsyncClient() as client:
            response = await client.post(url, content=body, headers=headers)
        self.replay_statuses.append((notification["payload"]["event_id"], response.status_code))
        self._attempted(notification, response.status_code)

    # -- HTTP ------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        return [
            Route("/notifications", self._endpoint(self._list), methods=["GET"]),
            Route("/notifications/{notification_id}", self._endpoint(self._get), methods=["GET"]),
            Route(
                "/notifications/{notification_id}/replay",
                self._endpoint(self._replay),
                methods=["POST"],
            ),
            Route(
                "/{rest:path}",
                self._endpoint(self._not_found, authed=False),
                methods=["GET", "POST", "PATCH", "PUT", "DELETE"],
            ),
        ]

    @staticmethod
    def _error(
        status: int,
        code: str,
        detail: str,
        type: str = "request_error",
        headers: Mapping[str, str] | None = None,
        errors: list[dict[str, str]] | None = None,
    ) -> Response:
        error: dict[str, Any] = {
            "type": type,
            "code": code,
            "detail": detail,
            "documentation_url": f"https://developer.paddle.com/errors/shared/{code}",
        }
        if errors:
            error["errors"] = errors
        return JSONResponse(
            {"error": error, "meta": {"request_id": _request_id()}},
            status_code=status,
            headers=headers,
        )

    def _fault_response(self, status: int, retry_after: float | None) -> Response:
        headers = {"Retry-After": _retry_after(retry_after)} if retry_after is not None else None
        if status == 429:
            return self._error(
                429,
                "too_many_requests",
                "IP address exceeded the allowed rate limit. Retry after the number of "
                "seconds in the Retry-After header.",
                "api_error",
                headers,
            )
        if status >= 500:
            return self._error(
                status, "internal_error", "An unexpected error occurred.", "api_error", headers
            )
        return self._error(status, "forbidden", "Fault injected", headers=headers)

    async def _check_auth(self, request: Request) -> Response | None:
        raw = request.headers.get("authorization")
        if raw is None:
            return self._error(403, "authentication_missing", "Authentication header missing.")
        key = _bearer(request)
        if key is None:
            return self._error(
                403,
                "authentication_malformed",
                "Authentication header included, but incorrectly formatted.",
            )
        if not hmac.compare_digest(key.encode(), self.api_key.encode()):
            return self._error(403, "forbidden", "You aren't permitted to perform this request.")
        return None

    async def _not_found(self, request: Request) -> Response:
        return self._error(404, "not_found", f"Requested route {request.url.path} not found.")

    def listed(self) -> list[dict[str, Any]]:
        """Notifications the API still holds (ninety days), oldest first."""
        cutoff = self.now() - PADDLE_RETENTION_S
        # One without occurred_at (Paddle's schema requires none of its fields) is kept.
        return [
            n
            for n in self.notifications
            if "occurred_at" not in n or (_parse_time(n["occurred_at"]) or 0.0) >= cutoff
        ]

    async def _get(self, request: Request) -> Response:
        wanted = request.path_params["notification_id"]
        for n in self.listed():
            if n.get("id") == wanted:
                return JSONResponse({"data": n, "meta": {"request_id": _request_id()}})
        return self._error(404, "entity_not_found", f"Entity {wanted} not found", "request_error")

    def _invalid(self, field: str, message: str) -> Response:
        return self._error(
            400,
            "invalid_field",
            "Request does not pass validation",
            errors=[{"field": field, "message": message}],
        )

    async def _list(self, request: Request) -> Response:
        query = request.query_params
        self.queries.append(dict(query))
        try:
            per_page = int(query.get("per_page", "50"))
        except ValueError:
            return self._invalid("per_page", "Invalid type. Expected: integer")
        if per_page < 1:
            return self._invalid("per_page", "Must be greater than or equal to 1")
        per_page = min(per_page, 200)
        order = query.get("order_by", "id[DESC]").upper()  # Paddle's SDK sends id[asc]
        if order not in ("ID[DESC]", "ID[ASC]"):
            return self._invalid("order_by", "Must be one of: id[ASC], id[DESC]")
        settings = [s for s in query.get("notification_setting_id", "").split(",") if s]
        statuses = [s for s in query.get("status", "").split(",") if s]
        if any(s not in PADDLE_STATUSES for s in statuses):
            return self._invalid("status", f"Must be one of: {', '.join(PADDLE_STATUSES)}")
        bounds: dict[str, float] = {}
        for name in ("from", "to"):
            raw = query.get(name)
            if raw is None:
                continue
            parsed = _parse_time(raw)
            if parsed is None:
                return self._invalid(name, "Does not match format 'date-time'")
            bounds[name] = parsed
        search = query.get("search")
        wanted_filter = query.get("filter")

        def wanted(n: Mapping[str, Any]) -> bool:
            if "occurred_at" not in n:  # no time to filter on: listed
                return not settings or n.get("notification_setting_id") in settings
            occurred = _parse_time(n["occurred_at"]) or 0.0
            if settings and n["notification_setting_id"] not in settings:
                return False
            if statuses and n["status"] not in statuses:
                return False
            if "from" in bounds and occurred < bounds["from"]:
                return False
            if "to" in bounds and occurred >= bounds["to"]:
                return False
            if search and search not in n["id"] and search not in n["type"]:
                return False
            return not wanted_filter or wanted_filter in json.dumps(n["payload"]["data"])

        descending = order == "ID[DESC]"

        def ident(n: Mapping[str, Any]) -> str:
            return str(n.get("id") or "")

        ordered = sorted(self.listed(), key=ident, reverse=descending)
        after = query.get("after")
        if after:
            ordered = [n for n in ordered if (ident(n) < after if descending else ident(n) > after)]
        candidates = [n for n in ordered if wanted(n)]
        page = candidates[:per_page]
        has_more = len(candidates) > per_page
        params = {k: v for k, v in query.items() if k != "after"}
        if page and page[-1].get("id"):
            params["after"] = page[-1]["id"]
        base = str(request.base_url).rstrip("/")
        return JSONResponse(
            {
                "data": page,
                "meta": {
                    "request_id": _request_id(),
                    "pagination": {
                        "per_page": per_page,
                        "next": f"{base}/notifications?{urlencode(params)}",
                        "has_more": has_more,
                        "estimated_total": len(candidates),
                    },
                },
            }
        )

    async def _replay(self, request: Request) -> Response:
        wanted = request.path_params["notification_id"]
        try:
            original = self.notification(wanted)
        except KeyError:
            return self._error(404, "entity_not_found", f"Entity {wanted} not found")
        if original not in self.listed():
            return self._error(404, "entity_not_found", f"Entity {wanted} not found")
        if original["origin"] != "event":
            return self._error(
                400,
                "notification_replay_invalid_origin_type",
                f"Notification {wanted} can't be replayed because its origin is not `event`.",
            )
        if original["status"] not in ("delivered", "failed"):
            return self._error(
                400,
                "notification_cannot_replay",
                f"Notification {wanted} can't be replayed because it's not `delivered` or "
                "`failed`.",
            )
        event = self.events[original["payload"]["event_id"]]
        replay = self._notify(event, original["notification_setting_id"], "replay")
        original["replayed_at"] = _utc_micro(self.now())
        if self.webhook_target is not None:
            url, secret = self.webhook_target
            self._in_background(self._deliver_replay(replay, url, secret))
        return JSONResponse(
            {"data": {"notification_id": replay["id"]}, "meta": {"request_id": _request_id()}},
            status_code=202,
        )


# ---------------------------------------------------------------------------------
# Square
# ---------------------------------------------------------------------------------


class SquareEmulator(_Emulator):
    """The Events API of one application: ``POST /v2/events`` (Search events) and
    ``PUT /v2/events/enable|disable``. Webhooks are signed for ``notification_url``,
    the URL of the webhook subscription (the source's ``public_url``)."""

    def __init__(
        self,
        token: str,
        notification_url: str,
        *,
        merchant_ids: Sequence[str] = ("MLEFBHHSJGVHD",),
        location_ids: Sequence[str] = ("L88917AVBK2S5", "LH2XR7AMG39HX"),
        api_version: str = "2026-09-16",
    ) -> None:
        self.token = token
        self.notification_url = notification_url
        self.merchant_ids = list(merchant_ids)
        self.location_ids = list(location_ids)
        self.api_version = api_version
        self.events: list[dict[str, Any]] = []  # creation order
        self.searchable: set[str] = set()  # event IDs created while events were enabled
        self.enabled = True
        self.searches: list[dict[str, Any]] = []  # the body of every search request
        self._serial: dict[str, int] = {}  # event_id -> creation serial (tie-breaker)
        super().__init__()

    # -- recording ---------------------------------------------------------------
    def add_event(
        self,
        at: float,
        type: str = "payment.updated",
        *,
        merchant_id: str | None = None,
        location_id: str | None = None,
    ) -> str:
        """Record one event created at unix time ``at``; returns its ``event_id``."""
        number = len(self.events) + 1
        location = location_id or self.location_ids[number % len(self.location_ids)]
        kind = type.partition(".")[0]
        object_id = secrets.token_hex(11).upper()
        when = _utc_micro(at)
        event: dict[str, Any] = {
            "merchant_id": merchant_id or self.merchant_ids[number % len(self.merchant_ids)],
            "location_id": location,
            "type": type,
            "event_id": str(uuid.uuid4()),
            "created_at": when,
            "data": {
                "type": kind,
                "id": object_id,
                "object": {
                    kind: {
                        "id": object_id,
                        "amount_money": {"amount": 100 * number, "currency": "USD"},
                        "status": "COMPLETED",
                        "location_id": location,
                        "created_at": when,
                        "updated_at": when,
                        "version": 1,
                    }
                },
            },
        }
        self._serial[event["event_id"]] = number
        self.events.append(event)
        if self.enabled:
            self.searchable.add(event["event_id"])
        return str(event["event_id"])

    def add_events(
        self, n: int, start: float, step_s: float, type: str = "payment.updated"
    ) -> list[str]:
        """Record ``n`` events at ``start``, ``start + step_s``, ...; returns their IDs."""
        return [self.add_event(start + i * step_s, type) for i in range(n)]

    def event(self, event_id: str) -> dict[str, Any]:
        return next(e for e in self.events if e["event_id"] == event_id)

    def add_listed(self, event: dict[str, Any]) -> str:
        """Record an event as given (an example of Square's own description), searchable."""
        self._serial[event["event_id"]] = len(self.events) + 1
        self.events.append(event)
        self.searchable.add(event["event_id"])
        return str(event["event_id"])

    def _sort_key(self, event: Mapping[str, Any]) -> tuple[float, int]:
        return (_parse_utc(event["created_at"]) or 0.0, self._serial[event["event_id"]])

    # -- webhooks ------------------------------------------------------------------
    def _webhook_requests(self, secret: str) -> list[WebhookRequest]:
        requests = []
        for event in self.events:
            body = _compact(event)
            headers = {
                "x-square-hmacsha256-signature": square_signature(
                    secret, self.notification_url, body
                ),
                "square-environment": "Sandbox",
                "square-initial-delivery-timestamp": _utc_micro(self.signing_now()),
                "square-retry-number": "0",
                "content-type": "application/json",
                "user-agent": "Square Connect v2",
            }
            requests.append((event["event_id"], body, headers))
        return requests

    # -- HTTP ------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        return [
            Route("/v2/events", self._endpoint(self._search), methods=["POST"]),
            Route("/v2/events/enable", self._endpoint(self._enable), methods=["PUT"]),
            Route("/v2/events/disable", self._endpoint(self._disable), methods=["PUT"]),
            Route(
                "/{rest:path}",
                self._endpoint(self._not_found, authed=False),
                methods=["GET", "POST", "PUT", "DELETE"],
            ),
        ]

    @staticmethod
    def _errors(
        status: int,
        category: str,
        code: str,
        detail: str,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        error = {"category": category, "code": code, "detail": detail}
        if field is not None:
            error["field"] = field
        return JSONResponse({"errors": [error]}, status_code=status, headers=headers)

    def _fault_response(self, status: int, retry_after: float | None) -> Response:
        headers = {"Retry-After": _retry_after(retry_after)} if retry_after is not None else None
        if status == 429:
            return self._errors(
                429, "RATE_LIMIT_ERROR", "RATE_LIMITED", "Rate limited.", headers=headers
            )
        if status >= 500:
            return self._errors(
                status,
                "API_ERROR",
                "INTERNAL_SERVER_ERROR",
                "An internal error occurred.",
                headers=headers,
            )
        return self._errors(status, "AUTHENTICATION_ERROR", "FORBIDDEN", "Fault injected")

    async def _check_auth(self, request: Request) -> Response | None:
        version = request.headers.get("square-version")
        if version is not None and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", version):
            return self._errors(
                400,
                "INVALID_REQUEST_ERROR",
                "INVALID_SQUARE_VERSION_FORMAT",
                f"Invalid Square-Version format: {version}",
            )
        if "authorization" not in request.headers:
            return self._errors(
                401,
                "AUTHENTICATION_ERROR",
                "UNAUTHORIZED",
                "Your request did not include an `Authorization` http header with an access token.",
            )
        token = _bearer(request)
        if token is None:
            return self._errors(
                401,
                "AUTHENTICATION_ERROR",
                "UNAUTHORIZED",
                "The `Authorization` http header of your request was malformed.",
            )
        if not hmac.compare_digest(token.encode(), self.token.encode()):
            return self._errors(
                401, "AUTHENTICATION_ERROR", "UNAUTHORIZED", "This request could not be authorized."
            )
        return None

    async def _not_found(self, request: Request) -> Response:
        return self._errors(
            404, "INVALID_REQUEST_ERROR", "NOT_FOUND", f"Resource not found: {request.url.path}"
        )

    async def _enable(self, _: Request) -> Response:
        self.enabled = True
        return JSONResponse({})

    async def _disable(self, _: Request) -> Response:
        self.enabled = False
        return JSONResponse({})

    def _bad(self, detail: str, field: str, code: str = "INVALID_VALUE") -> Response:
        return self._errors(400, "INVALID_REQUEST_ERROR", code, detail, field)

    @staticmethod
    def _digest(query: object) -> str:
        canonical = json.dumps(query, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @staticmethod
    def _encode_cursor(digest: str, position: tuple[float, int]) -> str:
        raw = json.dumps({"q": digest, "at": list(position)}).encode()
        return base64.urlsafe_b64encode(raw).decode()

    @staticmethod
    def _decode_cursor(cursor: str) -> tuple[str, tuple[float, int]] | None:
        try:
            data = json.loads(base64.urlsafe_b64decode(cursor.encode()))
            at = data["at"]
            return str(data["q"]), (float(at[0]), int(at[1]))
        except (ValueError, KeyError, TypeError, IndexError, binascii.Error):
            return None

    async def _search(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError:
            return self._bad("Request body is not valid JSON.", "body", "BAD_REQUEST")
        if not isinstance(body, dict):
            return self._bad("Request body must be a JSON object.", "body", "BAD_REQUEST")
        self.searches.append(body)
        limit = body.get("limit", 100)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100:
            return self._bad("`limit` must be between 1 and 100.", "limit")
        query = body.get("query") or {}
        wanted_filter = query.get("filter") or {}
        sort = query.get("sort") or {}
        if sort.get("field", "DEFAULT") != "DEFAULT":
            return self._bad("`field` must be DEFAULT.", "query.sort.field")
        order = sort.get("order", "DESC")
        if order not in ("ASC", "DESC"):
            return self._bad("`order` must be ASC or DESC.", "query.sort.order")
        created = wanted_filter.get("created_at") or {}
        bounds: dict[str, float] = {}
        for name in ("start_at", "end_at"):
            if name in created:
                parsed = _parse_time(str(created[name]))
                if parsed is None:
                    return self._bad(
                        f"Invalid RFC 3339 time: {created[name]}", f"query.filter.created_at.{name}"
                    )
                bounds[name] = parsed
        types = set(wanted_filter.get("event_types") or [])
        merchants = set(wanted_filter.get("merchant_ids") or [])
        locations = set(wanted_filter.get("location_ids") or [])
        cutoff = self.now() - SQUARE_RETENTION_S

        def wanted(event: Mapping[str, Any]) -> bool:
            at = _parse_utc(event["created_at"]) or 0.0
            if event["event_id"] not in self.searchable or at < cutoff:
                return False
            if "start_at" in bounds and at < bounds["start_at"]:
                return False
            if "end_at" in bounds and at >= bounds["end_at"]:
                return False
            if types and event["type"] not in types:
                return False
            if merchants and event["merchant_id"] not in merchants:
                return False
            return not locations or event.get("location_id") in locations

        descending = order == "DESC"
        ordered = sorted(
            (e for e in self.events if wanted(e)), key=self._sort_key, reverse=descending
        )
        digest = self._digest(query)
        cursor = body.get("cursor")
        if cursor:
            decoded = self._decode_cursor(str(cursor))
            if decoded is None:
                return self._bad("Invalid cursor.", "cursor", "INVALID_CURSOR")
            if decoded[0] != digest:
                return self._bad(
                    "The query must be the original query of the cursor.", "query", "BAD_REQUEST"
                )
            last = decoded[1]
            ordered = [
                e
                for e in ordered
                if (self._sort_key(e) < last if descending else self._sort_key(e) > last)
            ]
        page = ordered[:limit]
        answer: dict[str, Any] = {
            "events": page,
            "metadata": [
                {"event_id": e["event_id"], "api_version": self.api_version} for e in page
            ],
        }
        if len(ordered) > limit:
            answer["cursor"] = self._encode_cursor(digest, self._sort_key(page[-1]))
        return JSONResponse(answer)


# ---------------------------------------------------------------------------------
# GitLab
# ---------------------------------------------------------------------------------

GITLAB_KINDS = {
    # object_kind: (X-Gitlab-Event, trigger)
    "push": ("Push Hook", "push_hooks"),
    "merge_request": ("Merge Request Hook", "merge_requests_hooks"),
    "issue": ("Issue Hook", "issue_hooks"),
}


def _redacted(value: Any) -> Any:
    """``request_data`` as GitLab logs it: every e-mail address ``[REDACTED]``."""
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    if isinstance(value, str) and EMAIL.match(value):
        return GITLAB_REDACTED
    return value


class GitLabEmulator(_Emulator):
    """One project webhook's events (its delivery log) and their resending."""

    def __init__(
        self,
        token: str,
        project: str = "octo/hello",
        project_id: int = 42,
        hook_id: int = 7,
        *,
        hook_url: str = "https://hookd.example/hooks/gitlab",
        resends_per_minute: int = 5,
        instance: str = "https://gitlab.example.com",
    ) -> None:
        self.token = token
        self.project = project
        self.project_id = project_id
        self.hook_id = hook_id
        self.hook_url = hook_url
        self.instance = instance
        self.resends_per_minute = resends_per_minute
        self.logs: list[dict[str, Any]] = []  # id order
        self.bodies: dict[int, bytes] = {}  # log id -> the body sent (unredacted)
        self.webhook_target: tuple[str, str] | None = None  # (url, secret) for resends
        self.resent: list[tuple[str, int]] = []  # (Idempotency-Key, receiver status)
        self.resend_limited = 0
        self._resends: list[float] = []
        self._ids = itertools.count(1001)
        # GitLab does not promise the order of its list: answer oldest first, to test
        # a client that must not assume it.
        self.oldest_first = False
        super().__init__()

    # -- recording ---------------------------------------------------------------
    def _payload(self, kind: str, at: float, number: int) -> dict[str, Any]:
        project = {
            "id": self.project_id,
            "name": self.project.rpartition("/")[2],
            "web_url": f"{self.instance}/{self.project}",
            "path_with_namespace": self.project,
            "default_branch": "main",
        }
        user = {"id": 1, "name": "Administrator", "username": "root", "email": "admin@example.com"}
        if kind == "push":
            sha = hashlib.sha1(f"{number}".encode(), usedforsecurity=False).hexdigest()
            return {
                "object_kind": "push",
                "event_name": "push",
                "before": "0" * 40,
                "after": sha,
                "ref": "refs/heads/main",
                "checkout_sha": sha,
                "user_id": 1,
                "user_name": "Administrator",
                "user_username": "root",
                "user_email": "admin@example.com",
                "project_id": self.project_id,
                "project": project,
                "commits": [
                    {
                        "id": sha,
                        "message": f"change #{number}\n",
                        "title": f"change #{number}",
                        "timestamp": _utc_milli(at),
                        "author": {"name": "Jo Riley", "email": "jo@example.com"},
                        "added": [],
                        "modified": ["README.md"],
                        "removed": [],
                    }
                ],
                "total_commits_count": 1,
            }
        stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return {
            "object_kind": kind,
            "event_type": kind,
            "user": user,
            "project": project,
            "object_attributes": {
                "id": 5000 + number,
                "iid": number,
                "title": f"{kind} #{number}",
                "created_at": stamp,
                "updated_at": stamp,
                "state": "opened",
                "action": "open",
            },
        }

    def add_event(self, at: float, kind: str = "push") -> str:
        """Record one delivery at unix time ``at`` (its body as sent and its log entry,
        e-mails redacted); returns its ``Idempotency-Key``."""
        event_header, trigger = GITLAB_KINDS[kind]
        number = len(self.logs) + 1
        payload = self._payload(kind, at, number)
        key = str(uuid.uuid4())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "GitLab/17.4.0",
            "Idempotency-Key": key,
            "X-Gitlab-Event": event_header,
            "X-Gitlab-Webhook-UUID": str(uuid.uuid4()),
            "X-Gitlab-Instance": self.instance,
            "X-Gitlab-Event-UUID": str(uuid.uuid4()),
            "X-Gitlab-Token": GITLAB_REDACTED,
        }
        self._log(at, trigger, headers, payload, "200")
        self.bodies[self.logs[-1]["id"]] = json.dumps(payload, separators=(",", ":")).encode()
        return key

    def add_events(self, n: int, start: float, step_s: float, kind: str = "push") -> list[str]:
        """Record ``n`` deliveries at ``start``, ``start + step_s``, ...; returns their keys."""
        return [self.add_event(start + i * step_s, kind) for i in range(n)]

    def _log(
        self,
        at: float,
        trigger: str,
        headers: dict[str, str],
        payload: dict[str, Any],
        status: str,
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "id": next(self._ids),
            "url": self.hook_url,
            "trigger": trigger,
            "request_headers": headers,
            "request_data": _redacted(payload),
            "response_headers": {"Content-Type": "application/json"},
            "response_body": "{}",
            "execution_duration": 0.05,
            "response_status": status,
            "created_at": _utc_milli(at),
        }
        self.logs.append(entry)
        return entry

    def logs_for(self, key: str) -> list[dict[str, Any]]:
        """Every log entry (the delivery and its resends) of one Idempotency-Key."""
        return [e for e in self.logs if e["request_headers"]["Idempotency-Key"] == key]

    def _sent_headers(self, entry: Mapping[str, Any], secret: str) -> dict[str, str]:
        logged: dict[str, str] = entry["request_headers"]
        headers = gitlab_headers(secret, logged["X-Gitlab-Event"], logged["Idempotency-Key"])
        for name in ("X-Gitlab-Webhook-UUID", "X-Gitlab-Event-UUID", "User-Agent"):
            headers[name] = logged[name]
        return headers

    # -- webhooks ------------------------------------------------------------------
    def _webhook_requests(self, secret: str) -> list[WebhookRequest]:
        requests = []
        seen: set[str] = set()
        for entry in self.logs:
            key = entry["request_headers"]["Idempotency-Key"]
            if key in seen or entry["id"] not in self.bodies:
                continue
            seen.add(key)
            requests.append((key, self.bodies[entry["id"]], self._sent_headers(entry, secret)))
        return requests

    def _sent(self, key: str, status: int) -> None:
        self.logs_for(key)[0]["response_status"] = str(status)

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
        """As the base method, keyed by Idempotency-Key; the log shows what the
        receiver answered, and ``internal error`` (GitLab's word for a delivery that
        got no answer) for a dropped one."""
        statuses = await super().send_webhooks(
            client, url, secret, drop=drop, duplicate=duplicate, shuffle=shuffle
        )
        for key in drop:
            self.logs_for(key)[0]["response_status"] = GITLAB_INTERNAL_ERROR
        return statuses

    # -- HTTP ------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        return [
            Route(
                "/projects/{rest:path}",
                self._endpoint(self._projects),
                methods=["GET", "POST"],
            ),
            Route(
                "/{rest:path}",
                self._endpoint(self._not_found, authed=False),
                methods=["GET", "POST", "PUT", "DELETE"],
            ),
        ]

    @staticmethod
    def _message(status: int, message: Any, headers: Mapping[str, str] | None = None) -> Response:
        return JSONResponse({"message": message}, status_code=status, headers=headers)

    def _fault_response(self, status: int, retry_after: float | None) -> Response:
        headers: dict[str, str] = {}
        if retry_after is not None:
            headers["Retry-After"] = _retry_after(retry_after)
        if status == 429:
            reset = math.ceil(self.now() + (retry_after if retry_after is not None else 60))
            headers.update(
                {
                    "RateLimit-Limit": "2000",
                    "RateLimit-Observed": "2001",
                    "RateLimit-Remaining": "0",
                    "RateLimit-Reset": str(reset),
                }
            )
            return Response(
                "Retry later\n", status_code=429, headers=headers, media_type="text/plain"
            )
        if status >= 500:
            return self._message(status, f"{status} Internal Server Error", headers)
        return self._message(status, f"{status} Forbidden", headers)

    async def _check_auth(self, request: Request) -> Response | None:
        token = request.headers.get("private-token") or _bearer(request)
        if not token or not hmac.compare_digest(token.encode(), self.token.encode()):
            return self._message(401, "401 Unauthorized")
        return None

    async def _not_found(self, _: Request) -> Response:
        return self._message(404, "404 Not Found")

    async def _projects(self, request: Request) -> Response:
        """``/projects/:id/hooks/:hook_id/events[/:hook_event_id/resend]``; ``:id`` is
        the project's ID or its URL-encoded path (``octo%2Fhello``, never ``octo/hello``)."""
        raw_path = request.scope.get("raw_path", b"").decode("latin-1").partition("?")[0]
        match = re.fullmatch(r"/projects/([^/]+)/hooks/(\d+)/events(?:/(\d+)/resend)?", raw_path)
        if match is None:
            return self._message(404, "404 Not Found")
        project, hook_id, event_id = match.groups()
        if project not in (str(self.project_id), quote(self.project, safe="")):
            return self._message(404, "404 Project Not Found")
        if int(hook_id) != self.hook_id:
            return self._message(404, "404 Not found")
        if event_id is None and request.method == "GET":
            return await self._list(request)
        if event_id is not None and request.method == "POST":
            return await self._resend(int(event_id))
        return self._message(405, "405 Method Not Allowed")

    def recent(self) -> list[dict[str, Any]]:
        """Log entries of the past seven days (from the start of that day), newest first
        (oldest first when ``oldest_first``)."""
        now = datetime.fromtimestamp(self.now(), UTC)
        start = now.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
        start -= GITLAB_RECENT_DAYS * DAY
        # An event logged without created_at (GitLab's own example has none) is kept.
        kept = [
            e
            for e in self.logs
            if "created_at" not in e or (_parse_time(e["created_at"]) or 0.0) >= start
        ]
        return sorted(
            kept, key=lambda e: (e.get("created_at", ""), e["id"]), reverse=not self.oldest_first
        )

    @staticmethod
    def _status_matches(entry: Mapping[str, Any], wanted: Sequence[str]) -> bool:
        status = entry["response_status"]
        for choice in wanted:
            if choice == "successful" and status.isdigit() and 200 <= int(status) < 300:
                return True
            if choice == "client_failure" and status.isdigit() and 400 <= int(status) < 500:
                return True
            if choice == "server_failure" and (
                status == GITLAB_INTERNAL_ERROR or (status.isdigit() and 500 <= int(status) < 600)
            ):
                return True
            if choice == status:
                return True
        return False

    async def _list(self, request: Request) -> Response:
        query = request.query_params
        try:
            per_page = int(query.get("per_page", "20"))
            page = int(query.get("page", "1"))
        except ValueError:
            return JSONResponse({"error": "per_page, page are invalid"}, status_code=400)
        if not 1 <= per_page <= 20:
            return JSONResponse({"error": "per_page does not have a valid value"}, status_code=400)
        page = max(page, 1)
        wanted = [s for s in query.get("status", "").split(",") if s]
        categories = ("successful", "client_failure", "server_failure")
        if any(not (s in categories or s.isdigit()) for s in wanted):
            return JSONResponse({"error": "status does not have a valid value"}, status_code=400)
        entries = [e for e in self.recent() if not wanted or self._status_matches(e, wanted)]
        total = len(entries)
        pages = max(1, math.ceil(total / per_page))
        chunk = entries[(page - 1) * per_page : page * per_page]
        base = str(request.url.replace(query="")).rstrip("?")
        others = {k: v for k, v in query.items() if k not in ("page", "per_page")}

        def link(number: int) -> str:
            return f"{base}?{urlencode({**others, 'page': number, 'per_page': per_page})}"

        headers = {
            "X-Page": str(page),
            "X-Per-Page": str(per_page),
            "X-Total": str(total),
            "X-Total-Pages": str(pages),
            "X-Next-Page": str(page + 1) if page < pages else "",
            "X-Prev-Page": str(page - 1) if page > 1 else "",
        }
        links = []
        if page > 1:
            links.append(f'<{link(page - 1)}>; rel="prev"')
        if page < pages:
            links.append(f'<{link(page + 1)}>; rel="next"')
        links += [f'<{link(1)}>; rel="first"', f'<{link(pages)}>; rel="last"']
        headers["Link"] = ", ".join(links)
        shown = [{f: e[f] for f in GITLAB_LOG_FIELDS if f in e} for e in chunk]
        return JSONResponse(shown, headers=headers)

    def _resend_limited(self) -> bool:
        now = self.now()
        self._resends = [t for t in self._resends if t > now - 60]
        if len(self._resends) >= self.resends_per_minute:
            self.resend_limited += 1
            return True
        self._resends.append(now)
        return False

    async def _resend(self, event_id: int) -> Response:
        if self._resend_limited():
            return self._message(
                429,
                {"error": "This endpoint has been requested too many times. Try again later."},
                {"Retry-After": "60"},
            )
        entry = next((e for e in self.logs if e["id"] == event_id), None)
        if entry is None:
            return self._message(404, "404 Not found")
        if entry["url"] != self.hook_url:
            return self._message(
                422, "The hook URL has changed, and this log entry cannot be retried"
            )
        logged = entry["request_headers"]
        headers = {
            **logged,
            "X-Gitlab-Webhook-UUID": str(uuid.uuid4()),
            "X-Gitlab-Event-UUID": str(uuid.uuid4()),
        }
        # GitLab sends what it logged: the redacted request data, the same key.
        body = json.dumps(entry["request_data"], separators=(",", ":")).encode()
        status = GITLAB_INTERNAL_ERROR
        if self.webhook_target is not None:
            url, secret = self.webhook_target
            sent = self._sent_headers({"request_headers": headers}, secret)
            async with httpx.AsyncClient() as client:
                answer = await client.post(url, content=body, headers=sent)
            status = str(answer.status_code)
        self._log(self.now(), entry["trigger"], headers, entry["request_data"], status)
        self.resent.append((logged["Idempotency-Key"], int(status) if status.isdigit() else 0))
        code: int | str = int(status) if status.isdigit() else status
        return JSONResponse({"response_status": code}, status_code=201)


# ---------------------------------------------------------------------------------


def webhook_key(headers: Mapping[str, str], body: bytes) -> str:
    """The key hookd dedupes a received emulator webhook on: the GitLab
    ``Idempotency-Key``, or the Paddle or Square ``event_id``."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if "idempotency-key" in lowered:
        return lowered["idempotency-key"]
    return str(json.loads(body)["event_id"])
