"""A fifth provider that exists only in the tests, declared as a real one would be.

Its webhooks carry ``X-Fifth-Signature: <hex HMAC-SHA256 of the body>`` and the
dedupe key in ``X-Fifth-Event-Id``; its list API (``FifthEmulator``, a Starlette app
the tests serve on loopback) pages through ``GET /events?stream=&since=&cursor=``.
``tests/integration/test_provider_registry.py`` registers ``PROVIDER`` and shows
that config, ``send-test``, the receiver and reconciliation take it with no other
change to hookd.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hookd.providers.base import (
    Envelope,
    Handwritten,
    HeaderMap,
    Key,
    Provider,
    SignedHeaders,
    Verified,
    checked_key,
    epoch_to_datetime,
    one_header,
    optional_header,
    parse_json_object,
    select_headers,
)
from hookd.providers.reconciling import ReconcileConfig, Reconciling
from hookd.providers.signatures import hmac_sha256_hex, match_hmac, parse_hex_digest, plain_secret
from hookd.sources import Source, api_url
from reconcile.http import Api
from reconcile.providers.base import Item, ListAdapter, reconciled
from store.intake.events import NewEvent

NAME = "fifth"
SIGNATURE_HEADER = "x-fifth-signature"
ID_HEADER = "x-fifth-event-id"
KEPT_HEADERS = (ID_HEADER, "content-type")
PAGE_SIZE = 2

# --- the webhook side (what hookd.providers.<name> would hold) ---------------------


def check_headers(headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
    digest = parse_hex_digest(one_header(headers, SIGNATURE_HEADER))
    return SignedHeaders(timestamp=None, prefix=b"", signatures=(("hex", digest),))


def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
    return match_hmac("fifth-hex", signed, body, keys, "hex")


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    payload = parse_json_object(body)
    kind = payload.get("type")
    return Envelope(
        dedupe_key=checked_key(optional_header(headers, ID_HEADER), "X-Fifth-Event-Id"),
        type=kind if isinstance(kind, str) else None,
        occurred_at=epoch_to_datetime(payload.get("created")),
        headers=select_headers(headers, KEPT_HEADERS),
    )


def fifth_headers(secret: str, body: bytes, event_id: str) -> dict[str, str]:
    return {
        "X-Fifth-Signature": hmac_sha256_hex(secret.encode(), body),
        "X-Fifth-Event-Id": event_id,
        "Content-Type": "application/json",
    }


def event_body(event: Mapping[str, object]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    event_id = f"ev_{uuid.uuid4().hex}"
    body = event_body({"id": event_id, "type": "thing.happened", "created": now, "n": seq})
    return fifth_headers(secret, body, event_id), body


class FifthReconcile(ReconcileConfig):
    """``[sources.reconcile]`` of a fifth source: which stream to list."""

    stream: str | None = None

    def incomplete(self) -> tuple[str, str] | None:
        missing = super().incomplete()
        if missing is None and not self.stream:
            return "stream", "is required for fifth"
        return missing


PROVIDER = Provider(
    name=NAME,
    scheme=Handwritten(plain_secret, check_headers, verify),
    envelope=envelope,
    sample_event=sample_event,
    reconcile=Reconciling(
        settings=FifthReconcile,
        api_url="https://fifth.invalid/api",
        adapter="tests.support.fifth_provider:FifthAdapter",
        # Its webhooks go out at once and are never retried: five seconds judge them.
        settle_s=5.0,
    ),
)

# --- the reconcile side (what reconcile.providers.<name> would hold) ---------------

REQUEST_INTERVAL_S = 0.01


class FifthAdapter(ListAdapter):
    def __init__(self, source: Source, api: Api, meta: Mapping[str, str], now: float) -> None:
        super().__init__(source, api, meta, now)
        rc = source.config.reconcile
        assert isinstance(rc, FifthReconcile)
        self._stream = rc.stream
        self._url = f"{api_url(source.config)}/events"
        # Something to keep between runs, as Slack keeps its team id.
        self._runs = int(meta.get("runs", "0"))

    @staticmethod
    def auth_headers(source: Source) -> dict[str, str]:
        rc = source.config.reconcile
        assert rc is not None
        return {"Authorization": f"Bearer {rc.token}"}

    @classmethod
    def request_interval_s(cls, source: Source) -> float:
        return REQUEST_INTERVAL_S

    def kept(self) -> dict[str, str]:
        return {"runs": str(self._runs + 1)}

    async def pages(self, since: float) -> AsyncIterator[list[Item]]:
        params: dict[str, Any] = {"stream": self._stream, "since": since}
        while True:
            page = (await self.api.request("GET", self._url, params=params)).json()
            yield [Item(key=e["id"], time=float(e["created"]), obj=e) for e in page["events"]]
            if page["next"] is None:
                return
            params["cursor"] = page["next"]

    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        event = item.obj or {}
        kind = event.get("type")
        return reconciled(
            source=self.source.name,
            provider=NAME,
            key=item.key,
            type_=kind if isinstance(kind, str) else None,
            occurred=item.time,
            headers={"content-type": "application/json"},
            body=event_body(event),
            how="reconcile:fifth-api",
            received_at=received_at,
        )


# --- the provider's API, emulated -------------------------------------------------


@dataclass
class FifthEmulator:
    """The fifth provider's list API over its in-memory events, newest first."""

    token: str
    stream: str

    def __post_init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.calls = 0
        self.app = Starlette(routes=[Route("/events", self._list)])

    def add(self, event_id: str, created: float) -> dict[str, Any]:
        event = {"id": event_id, "type": "thing.happened", "created": created}
        self.events.append(event)
        return event

    async def send_webhook(
        self, client: httpx.AsyncClient, url: str, secret: str, event: dict[str, Any]
    ) -> httpx.Response:
        body = event_body(event)
        headers = fifth_headers(secret, body, event["id"])
        return await client.post(url, content=body, headers=headers)

    async def _list(self, request: Request) -> JSONResponse:
        self.calls += 1
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        if request.query_params.get("stream") != self.stream:
            return JSONResponse({"error": "no such stream"}, status_code=404)
        since = float(request.query_params.get("since", "0"))
        start = int(request.query_params.get("cursor", "0"))
        listed = sorted(
            (e for e in self.events if e["created"] >= since), key=lambda e: -e["created"]
        )
        page = listed[start : start + PAGE_SIZE]
        more = start + PAGE_SIZE < len(listed)
        return JSONResponse({"events": page, "next": str(start + PAGE_SIZE) if more else None})
