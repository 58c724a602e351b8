"""Handlers, the code run for each stored event: what they receive, how they are found,
and ``forward``.

A handler is ``async def handler(event) -> None``. Raising means "retry later";
raising ``PermanentError`` means "this will never work": the event goes dead
at once with the reason.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from ingest.config import ForwardConfig, Sources
from ingest.errors import ConfigError, HookdError
from ingest.signing import standard_headers

FORWARD = "forward"


class PermanentError(HookdError):
    """A handler failure that retrying cannot fix (e.g. a 4xx from the target)."""


@dataclass(frozen=True, slots=True)
class Event:
    """What a handler sees of a stored event."""

    id: str
    source: str
    provider: str
    type: str | None
    dedupe_key: str
    origin: str
    received_at: datetime
    headers: Mapping[str, str]
    body: bytes = field(repr=False)
    idempotency_key: str = ""

    def json(self) -> Any:
        return json.loads(self.body)


Handler = Callable[[Event], Awaitable[None]]


def idempotency_key(event_id: str, handler: str) -> str:
    """Stable per (event, handler): the same on every attempt, replay and worker."""
    digest = hashlib.sha256(f"{event_id}\x00{handler}".encode()).hexdigest()[:32]
    return f"hookd_{digest}"


def import_handler(ref: str) -> Handler:
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"handler {ref!r}: cannot import {module_name}: {exc}") from None
    func = getattr(module, attr, None)
    if func is None:
        raise ConfigError(f"handler {ref!r}: {module_name} has no attribute {attr!r}")
    if not inspect.iscoroutinefunction(func):
        raise ConfigError(f"handler {ref!r}: must be an async function")
    handler: Handler = func
    return handler


def forward_handler(config: ForwardConfig, client: httpx.AsyncClient) -> Handler:
    """POST the original body to ``config.url``, signed with Standard Webhooks v1.

    ``webhook-id`` is the hookd event id, so the target can deduplicate retries.
    5xx, 429 and transport errors retry; any other 4xx is permanent.
    """

    async def forward(event: Event) -> None:
        now = int(datetime.now().timestamp())
        headers = standard_headers(config.secret, event.body, event.id, now)
        headers["Idempotency-Key"] = event.idempotency_key
        if event.type:
            headers["X-Hookd-Event-Type"] = event.type
        headers["X-Hookd-Source"] = event.source
        response = await client.post(
            config.url, content=event.body, headers=headers, timeout=config.timeout_s
        )
        if response.status_code >= 500 or response.status_code == 429:
            raise RuntimeError(f"forward target answered {response.status_code}")
        if response.status_code >= 400:
            raise PermanentError("forward_rejected", f"target answered {response.status_code}")

    return forward


def load_handlers(
    sources: Sources, client: httpx.AsyncClient
) -> dict[str, list[tuple[str, Handler]]]:
    """Per source, the (name, callable) pairs to run in order; import errors stop start-up."""
    table: dict[str, list[tuple[str, Handler]]] = {}
    for source in sources:
        chain = [(ref, import_handler(ref)) for ref in source.config.handlers]
        if source.config.forward is not None:
            chain.append((FORWARD, forward_handler(source.config.forward, client)))
        table[source.name] = chain
    return table
