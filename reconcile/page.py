"""One page of a reconciliation run: the items it judges, the repairs of those missing,
and the write that stores them with the run's counters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from hookd.errors import ReconcileError
from hookd.sources import Source
from reconcile.providers.base import Item, ListAdapter, Unrepairable
from reconcile.run import Run, Tally
from store.crypto import BodyCipher
from store.intake.events import NewEvent, insert_events
from store.reconcile import coverage as ledger
from store.reconcile import runs as state
from store.reconcile.audit import Acked
from store.values import Unstorable, checked_key, storable


def judged(items: Sequence[Item], until: float) -> list[Item]:
    """The items older than ``until``, the end of the run's window: younger ones' webhooks
    may be on their way. An id no row can hold cannot be compared either: say so.
    Items the run cannot judge (``Item.doubt``) are left to ``doubtful``."""
    kept = [i for i in items if i.doubt is None and i.time < until]
    for item in kept:
        try:
            checked_key(item.key)
        except Unstorable as exc:
            raise ReconcileError(
                "unstorable_item",
                f"the provider listed an event whose {exc.detail}; "
                "it can be neither compared nor stored",
            ) from None
    return kept


def doubtful(items: Sequence[Item]) -> list[Item]:
    """The items the run cannot judge (the API left out their time or key): those with
    a key a row holds are looked up, and accounted for when stored."""
    found = []
    for item in items:
        if item.doubt is None:
            continue
        try:
            usable = not item.key or bool(checked_key(item.key))
        except Unstorable:
            usable = False
        found.append(item if usable else Item(key="", time=0.0, ref=item.ref, doubt=item.doubt))
    return found


@dataclass(frozen=True)
class Repairs:
    """The events to store, and the missing items that cannot be, each with why."""

    events: list[NewEvent]
    unrepaired: list[tuple[Item, str]]


async def repairs(
    adapter: ListAdapter, source: Source, missing: Sequence[Item], dry_run: bool
) -> Repairs:
    """The events to store for the missing items; none when the provider is asked to
    send them again instead (``redelivers``), or for a dry run. An item the adapter
    cannot store as it was sent (``Unrepairable``) is left out, with its reason."""
    if not missing or dry_run:
        return Repairs([], [])
    if adapter.redelivers:
        for item in missing:
            await adapter.redeliver(item)
        return Repairs([], [])
    received = datetime.now(UTC)
    events: list[NewEvent] = []
    unrepaired: list[tuple[Item, str]] = []
    for item in missing:
        try:
            # Its labels in the safe form the receiver stores (store.values).
            events.append(storable(await adapter.repair(item, received)))
        except Unrepairable as exc:
            unrepaired.append((item, exc.reason))
    order = source.config.order
    if order is not None:  # as the receiver does
        events = [order.stamp(e) for e in events]
    return Repairs(events, unrepaired)


@dataclass(frozen=True)
class Recorded:
    """What a page's write found: missing items, those repaired, the ids of the rows it
    created, and the acknowledged deliveries new to the ledger."""

    found: int
    repaired: int
    created: list[str]
    violations: list[Acked]


@dataclass(frozen=True)
class Page:
    """A page as judged: its items, those missing, the repairs, the broken acks."""

    items: list[Item]
    missing: list[Item]
    events: list[NewEvent]
    broken: list[Acked]


async def record(
    conn: AsyncConnection, run: Run, page: Page, tally: Tally, cipher: BodyCipher
) -> Recorded:
    """Store the repairs with the run's counters, in ``conn``'s transaction."""
    created: list[str] = []
    if page.events:
        stored = await insert_events(conn, page.events, cipher)
        created = [s.event_id for s in stored if s.created]
        # Whose webhook comes after all is late, counted on this run.
        keys = [e.dedupe_key for e, s in zip(page.events, stored, strict=True) if s.created]
        await ledger.mark_repaired(conn, run.source.name, keys, run.id)
    # A webhook that landed while we fetched was not missed after all.
    found = len(created) if page.events else len(page.missing)
    repaired = 0 if run.dry_run else found
    violations = await run.acks.record(conn, page.broken)
    await state.add_run_counts(
        conn,
        run.id,
        items_checked=len(page.items),
        items_missing=found,
        items_repaired=repaired,
        pages=1,
        ack_violations=len(violations),
        **tally.take(),
    )
    return Recorded(found, repaired, created, violations)
