"""Zendesk ``GET /api/v2/webhooks/{webhook_id}/invocations``: the webhook's invocations
created in the window (``filter[from_ts]``, ``filter[to_ts]``), a hundred a page at
most (``page[size]``), paged with the cursor of each answer (``page[after]``: its
``meta.after_cursor``) while ``meta.has_more``. Zendesk lists seven days of them.

An invocation is listed under its ``id``, the ``X-Zendesk-Webhook-Invocation-Id`` every
attempt of it carries: the receiver stores a trigger's or automation's webhook under
``invocation:<id>``, and so is each item keyed. A webhook subscribed to Zendesk events
is stored under the event's own ``id``, which an invocation does not show: such a
webhook cannot be reconciled, and its runs fail saying so (the webhook's
``subscriptions`` are read first, ``GET /api/v2/webhooks/{webhook_id}``).

An invocation does not carry what was sent. A missing one is repaired from its attempts
(``GET …/invocations/{id}/attempts``), which show the request of each attempt, its
headers and body: the body is stored as sent, with the Zendesk headers the receiver
keeps. An invocation none of whose attempts shows a request body cannot be stored: the
run fails naming it, leaving its window a hole (a ``failed`` one in the coverage
ledger, with that reason). Runs keep failing on it until Zendesk no longer lists it;
the window is then recorded as lost. Zendesk has no call that sends an invocation
again.

Each invocation says what the receiver last answered (``latest_status``, an HTTP
status): one answered with a 2xx is noted for the ack audit. The registration is the
webhook itself: its ``status``, ``endpoint`` (compared with the source's
``public_url``) and ``http_method``.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import TypedDict
from urllib.parse import quote

from hookd.errors import ReconcileError
from hookd.providers.rfc3339 import parse_rfc3339, utc_z
from hookd.providers.zendesk import (
    INVOCATION_HEADER,
    KEPT_HEADERS,
    ZendeskReconcile,
    invocation_key,
)
from hookd.sources import Source, api_url
from reconcile.http import Api
from reconcile.providers.base import (
    Item,
    ListAdapter,
    Registration,
    Unrepairable,
    is_2xx,
    reconciled,
    same_url,
    settings_of,
    shown_url,
)
from store.intake.events import NewEvent
from store.reconcile.audit import Acked

# What a webhook connected to triggers or automations is subscribed to.
CONDITIONAL = "conditional_ticket_events"


class Invocation(TypedDict, total=False):
    """One invocation of ``GET …/invocations``, the fields read of it."""

    id: str
    created_at: str
    latest_completed_at: str | None
    status: str
    latest_status: int | None


class _Meta(TypedDict, total=False):
    has_more: bool
    after_cursor: str | None
    before_cursor: str | None


class InvocationList(TypedDict, total=False):
    """``GET …/invocations``: a page of invocations, and the cursor of the next."""

    invocations: list[Invocation]
    meta: _Meta


class _Request(TypedDict, total=False):
    headers: object
    payload: object


class Attempt(TypedDict, total=False):
    """One attempt of ``GET …/invocations/{id}/attempts``: the request sent."""

    id: str
    invocation_id: str
    status: str
    completed_at: str
    request: _Request


class AttemptList(TypedDict, total=False):
    attempts: list[Attempt]


class Webhook(TypedDict, total=False):
    """``GET /api/v2/webhooks/{id}``'s ``webhook``, the fields compared."""

    id: str
    name: str
    status: str
    endpoint: str
    http_method: str
    request_format: str
    subscriptions: list[str]


class WebhookAnswer(TypedDict, total=False):
    webhook: Webhook


def settings(source: Source) -> ZendeskReconcile:
    return settings_of(source, ZendeskReconcile)


def header_map(headers: object) -> dict[str, str]:
    """An attempt's request headers, lower-cased: an object of names and values, or a
    list of ``{"key", "value"}`` pairs."""
    if isinstance(headers, dict):
        return {str(k).lower(): str(v) for k, v in headers.items()}
    found: dict[str, str] = {}
    if isinstance(headers, list):
        for pair in headers:
            if isinstance(pair, dict) and isinstance(pair.get("key"), str):
                found[pair["key"].lower()] = str(pair.get("value", ""))
    return found


def sent_body(attempt: Mapping[str, object]) -> str | None:
    """The request body an attempt shows (``request.payload``), or None."""
    request = attempt.get("request")
    if not isinstance(request, dict):
        return None
    body = request.get("payload")
    return body if isinstance(body, str) else None


class ZendeskAdapter(ListAdapter):
    def __init__(self, source: Source, api: Api, meta: Mapping[str, str], now: float) -> None:
        super().__init__(source, api, meta, now)
        self._rc = settings(source)
        assert self._rc.webhook_id is not None
        self._webhook_id = self._rc.webhook_id
        self._hook_url = f"{api_url(source.config)}/api/v2/webhooks/{quote(self._webhook_id)}"
        self._now = now
        self._webhook: Webhook | None = None

    @staticmethod
    def auth_headers(source: Source) -> dict[str, str]:
        rc = settings(source)
        token = rc.token or ""
        if rc.email is None:
            return {"Authorization": f"Bearer {token}"}
        basic = base64.b64encode(f"{rc.email}/token:{token}".encode()).decode("ascii")
        return {"Authorization": f"Basic {basic}"}

    async def _read_webhook(self) -> Webhook:
        if self._webhook is None:
            answer: WebhookAnswer = (await self.api.request("GET", self._hook_url)).json()
            found = answer.get("webhook") if isinstance(answer, dict) else None
            self._webhook = found if isinstance(found, dict) else {}
        return self._webhook

    async def pages(self, since: float) -> AsyncIterator[list[Item]]:
        webhook = await self._read_webhook()
        subscriptions = webhook.get("subscriptions") or []
        events = [s for s in subscriptions if s != CONDITIONAL]
        if events:
            raise ReconcileError(
                "unsupported",
                f"webhook {self._webhook_id} is subscribed to Zendesk events "
                f"({', '.join(map(str, events[:3]))}): an invocation does not name the "
                "event's id, the key such a webhook is stored under; only a webhook "
                "connected to triggers or automations can be reconciled",
            )
        params: dict[str, str | int] = {
            "filter[from_ts]": utc_z(since),
            "filter[to_ts]": utc_z(self._now),
            "page[size]": self._rc.page_size,
        }
        seen: set[str] = set()
        while True:
            answer: InvocationList = (
                await self.api.request("GET", f"{self._hook_url}/invocations", params=params)
            ).json()
            items: list[Item] = []
            for invocation in answer.get("invocations") or []:
                ident, created = invocation.get("id"), parse_rfc3339(invocation.get("created_at"))
                if not isinstance(ident, str) or not ident or created is None:
                    continue
                when = created.timestamp()
                if when < since:
                    continue
                key = invocation_key(ident)
                status = invocation.get("latest_status")
                if is_2xx(status):
                    at = parse_rfc3339(invocation.get("latest_completed_at"))
                    assert isinstance(status, int | str)
                    self.note_acked(Acked(key, ident, int(status), at))
                if key in seen:
                    continue
                seen.add(key)
                items.append(Item(key=key, time=when, ref=ident, obj=invocation))
            yield items
            meta = answer.get("meta") or {}
            cursor = meta.get("after_cursor")
            if not meta.get("has_more") or not isinstance(cursor, str) or not cursor:
                return
            params["page[after]"] = cursor

    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        url = f"{self._hook_url}/invocations/{quote(str(item.ref))}/attempts"
        answer: AttemptList = (await self.api.request("GET", url)).json()
        attempts = [a for a in answer.get("attempts") or [] if isinstance(a, dict)]
        shown = next((a for a in attempts if sent_body(a) is not None), None)
        body = None if shown is None else sent_body(shown)
        if shown is None or body is None:
            raise Unrepairable(
                f"unrepairable: invocation {item.ref} of webhook {self._webhook_id} never "
                f"reached hookd, and none of its {len(attempts)} attempts in Zendesk's log "
                "shows the request body: it cannot be stored"
            )
        sent = header_map(shown.get("request", {}).get("headers"))
        headers = {k: v for k, v in sent.items() if k in KEPT_HEADERS}
        headers[INVOCATION_HEADER] = str(item.ref)
        headers.setdefault("x-zendesk-webhook-id", self._webhook_id)
        return reconciled(
            source=self.source.name,
            provider="zendesk",
            key=item.key,
            type_=None,
            occurred=item.time,
            headers=headers,
            body=body.encode("utf-8"),
            how=f"reconcile:zendesk-api;invocation={item.ref}",
            received_at=received_at,
        )

    async def registration(self) -> Registration:
        if not self._rc.check_registration:
            return Registration(unchecked="check_registration = false")
        webhook = await self._read_webhook()
        status, endpoint = webhook.get("status"), webhook.get("endpoint")
        method = webhook.get("http_method")
        registered: dict[str, object] = {
            "id": webhook.get("id"),
            "name": webhook.get("name"),
            "status": status,
            "endpoint": shown_url(endpoint),
            "http_method": method,
            "request_format": webhook.get("request_format"),
            "subscriptions": list(webhook.get("subscriptions") or []),
        }
        problems: list[str] = []
        if status != "active":
            problems.append(f"the webhook is {status or 'not active'}: Zendesk sends it nothing")
        expected = self.source.config.public_url
        if expected is not None and not same_url(endpoint, expected):
            problems.append(
                f"the webhook posts to {shown_url(endpoint)}, not to the source's public_url "
                f"{shown_url(expected)}"
            )
        if method != "POST":
            problems.append(f"the webhook sends {method or 'no method'} requests; hookd takes POST")
        return Registration(registered, tuple(problems))
