"""Handlers, the code run for each stored event: what they receive, how they are found,
and ``forward``.

A handler is ``async def handler(event) -> None``. Raising means "retry later";
raising ``PermanentError`` means "this will never work": the event goes dead
at once with the reason.
"""

from __future__ import annotations

import importlib
import inspect
from datetime import datetime

import httpx

from hookd import tracing
from hookd.errors import ConfigError, PermanentError
from hookd.event import Event, Handler
from hookd.providers.standard import standard_headers
from hookd.routing import FORWARD
from hookd.sources import ForwardConfig, Sources

__all__ = ["FORWARD", "forward_handler", "import_handler", "load_handlers"]


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
        attributes = {"hookd.event_id": event.id, "hookd.destination": FORWARD}
        with tracing.span("hookd.deliver", attributes) as current:
            tracing.inject(headers)  # W3C traceparent, when tracing is on
            response = await client.post(
                config.url, content=event.body, headers=headers, timeout=config.timeout_s
            )
            tracing.annotate(current, {"http.response.status_code": response.status_code})
        if response.status_code >= 500 or response.status_code == 429:
            raise RuntimeError(f"forward target answered {response.status_code}")
        if response.status_code >= 400:
            raise PermanentError("forward_rejected", f"target answered {response.status_code}")

    return forward


def load_handlers(
    sources: Sources, client: httpx.AsyncClient
) -> dict[str, list[tuple[str, Handler]]]:
    """Per source, the (name, callable) pairs to run in order; import errors stop start-up.

    ``[sources.forward]`` is not among them: it is a destination, delivered beside the
    handlers by ``processing.destinations.Router`` as ``forward``. ``client`` is kept
    for callers of this signature."""
    del client
    return {
        source.name: [(ref, import_handler(ref)) for ref in source.config.handler_refs]
        for source in sources
    }
