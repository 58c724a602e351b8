"""What a reconciliation adapter gives the poller."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hookd.sources import Source
from reconcile.http import Api
from store.events import NewEvent
from store.status import EventOrigin


@dataclass(frozen=True, slots=True)
class Item:
    """One thing the provider says it sent: its dedupe key and when."""

    key: str
    time: float
    ref: Any = None
    obj: dict[str, Any] | None = field(default=None, repr=False)


class ListAdapter(ABC):
    """A provider's list API, as the poller uses it.

    Named by ``Provider.reconcile.adapter`` ("module:Class") and built once per run.
    What differs between providers is declared here, not asked of the provider's
    name: how requests authenticate and are paced, whether a missing item can be
    sent again, and what the next run should start from."""

    def __init__(self, source: Source, api: Api, meta: Mapping[str, Any], now: float) -> None:
        """``meta``: what the source's last successful run kept (``kept``); ``now``:
        when this run started, in unix seconds."""
        self.source = source
        self.api = api

    @staticmethod
    @abstractmethod
    def auth_headers(source: Source) -> dict[str, str]:
        """The headers every request to the API carries (read again for each one)."""

    @classmethod
    def request_interval_s(cls, source: Source) -> float:
        """The least time between two requests, kept on our side; 0 leaves the pace
        to the provider's rate-limit answers."""
        return 0.0

    @property
    def redelivers(self) -> bool:
        """Whether a missing item is repaired by asking the provider to send its
        webhook again (``redeliver``) instead of storing it from the list (``repair``)."""
        return False

    def kept(self) -> dict[str, Any]:
        """What the next run of the source is given as ``meta``, merged over the last."""
        return {}

    @abstractmethod
    def pages(self, since: float) -> AsyncIterator[list[Item]]:
        """Newest first, page by page, down to ``since`` (unix seconds)."""

    @abstractmethod
    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        """The event to store for a missing item (may call the API)."""

    async def redeliver(self, item: Item) -> None:
        """Ask the provider to send the webhook again (when ``redelivers``)."""
        raise NotImplementedError(f"{self.source.provider} cannot be asked to resend an event")


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
        origin=EventOrigin.RECONCILE,
        received_at=received_at,
        occurred_at=None if occurred is None else datetime.fromtimestamp(occurred, UTC),
        verified_with=how,
        headers=headers,
        body=body,
    )
