"""Handlers for ``hookd try`` tests: one that returns something to show, one that does
not finish in time. Named as ``tests.support.try_handlers:NAME``."""

from __future__ import annotations

import asyncio

from hookd import Event


async def summarise(event: Event) -> dict[str, object]:
    """Returns what it saw (a handler's return value is ignored by processing; ``hookd
    try`` prints it)."""
    return {"type": event.type, "bytes": len(event.body), "key": event.idempotency_key}


async def too_slow(_: Event) -> None:
    await asyncio.sleep(60)


async def occurred(event: Event) -> str | None:
    """Returns the provider's time of the event, as the handler got it."""
    return None if event.occurred_at is None else event.occurred_at.isoformat()
