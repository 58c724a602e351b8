"""A no-op handler, for measuring hookd's own processing cost."""

from __future__ import annotations

from ingest.handlers import Event


async def noop(event: Event) -> None:
    return None
