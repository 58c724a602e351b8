"""What a reconciliation adapter gives the poller."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from store.events import NewEvent


@dataclass(frozen=True, slots=True)
class Item:
    """One thing the provider says it sent: its dedupe key and when."""

    key: str
    time: float
    ref: Any = None
    obj: dict[str, Any] | None = field(default=None, repr=False)


class Adapter(Protocol):
    def pages(self, since: float) -> AsyncIterator[list[Item]]:
        """Newest first, page by page, down to ``since`` (unix seconds)."""
        ...

    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        """The event to store for a missing item (may call the API)."""
        ...

    async def redeliver(self, item: Item) -> None:
        """Ask the provider to send the webhook again (GitHub only)."""
        ...


def reconciled(
    *,
    source: str,
    provider: str,
    key: str,
    type_: str | None,
    occurred: float | None,
    headers: dict[str, str],
    body: bytes,
    how: str,
    received_at: datetime,
) -> NewEvent:
    return NewEvent(
        source=source,
        provider=provider,
        dedupe_key=key,
        type=type_,
        origin="reconcile",
        received_at=received_at,
        occurred_at=None if occurred is None else datetime.fromtimestamp(occurred, UTC),
        verified_with=how,
        headers=headers,
        body=body,
    )
