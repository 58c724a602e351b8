"""A no-op handler, for measuring hookd's own processing cost."""

from __future__ import annotations

from hookd import Event


async def noop(event: Event) -> None:
    return None
