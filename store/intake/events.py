"""Event queries. Storing a batch inserts its keys into ``event_keys`` with
``INSERT … ON CONFLICT DO NOTHING RETURNING``: that table's primary key, the one
arbiter, decides what is new, and only the new keys get their ``events`` row, in
the same transaction. The receiver's hot path does the same in ``store.intake.fastpath``.

Why a redelivery racing a prune can never make a second row: a key is inserted
only where ``event_keys`` has none, and prune never deletes a key together with its
event. Pruning an event deletes the ``events`` row and marks its key (``pruned_at``)
in one transaction, so the key is there before, during and after; a redelivery
conflicts on it whenever it comes and is answered with the key's ``event_id``, the
original. Only ``keep_keys_days`` later, past the provider's redelivery horizon
(checked when the sources file is loaded), is a key itself deleted; a delivery after
that is a new event by design. Nothing reads ``events`` to decide, so ``events``
needs no unique index (which a table partitioned by time could not have)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple, TypedDict

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from hookd.timefmt import iso_z
from store import dialect, queries
from store.crypto import BodyCipher
from store.ids import new_ids
from store.models import EVENT_KEYS, EVENTS
from store.rows import EVENT_COLUMNS, EVENT_COLUMNS_NO_BODY, EventRow
from store.status import EventStatus


@dataclass(frozen=True, slots=True)
class NewEvent:
    source: str
    provider: str
    dedupe_key: str
    type: str | None
    origin: str
    received_at: datetime
    occurred_at: datetime | None
    verified_with: str
    headers: dict[str, str]
    body: bytes
    # [sources.order] (``store.delivery.objects.stamped``): the object the event is about, its
    # version there and the SHA-256 of the body; None on a source without ordering.
    object_key: str | None = None
    object_version: float | None = None
    payload_hash: str | None = None
    # The W3C traceparent of the receive, when tracing is on (``hookd.tracing``).
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class Stored:
    event_id: str
    created: bool
    # The row as committed, for a new event committed leased (``Lease``): what the
    # receiver hands to the processor that holds the lease.
    row: NewRow | None = None


class Lease(NamedTuple):
    """Whom a batch's new events are committed leased to, and until when: insert as
    claimed (``hookd serve`` hands them to a local processor with their rows, so it
    neither claims nor reads them). Events of a source with ``[sources.order]`` are
    never leased so: they are claimed one per object."""

    owner: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Tombstone:
    """An event whose row prune deleted: its key stays in ``event_keys``."""

    event_id: str
    source: str
    dedupe_key: str
    final_status: str | None  # an EventStatus: how the event ended
    received_at: datetime
    pruned_at: datetime

    def describe(self) -> str:
        """One sentence for the API's 404 and the command line."""
        return (
            f"event {self.event_id} was pruned at {iso_z(self.pruned_at)} by the retention "
            f"policy of source {self.source!r}; its final status was "
            f"{self.final_status or 'unknown'}"
        )


class NewRow(TypedDict):
    """An ``events`` row as ``prepare`` builds it: the columns an insert sets."""

    id: str
    source: str
    provider: str
    dedupe_key: str
    type: str | None
    origin: str
    received_at: datetime
    occurred_at: datetime | None
    verified_with: str
    headers: dict[str, str]
    body: bytes
    body_encrypted: bool
    status: EventStatus
    attempts: int
    next_attempt_at: datetime
    created_at: datetime
    updated_at: datetime
    object_key: str | None
    object_version: float | None
    payload_hash: str | None
    traceparent: str | None
    lease_owner: str | None
    lease_expires_at: datetime | None


class KeyRow(TypedDict):
    """An ``event_keys`` row as an insert sets it (the tombstone columns stay NULL)."""

    source: str
    dedupe_key: str
    event_id: str
    received_at: datetime


def key_row(row: NewRow) -> KeyRow:
    return {
        "source": row["source"],
        "dedupe_key": row["dedupe_key"],
        "event_id": row["id"],
        "received_at": row["received_at"],
    }


SQL = queries.load("events")
KEYS_PRUNED_PG = sa.text(SQL["keys_pruned_pg"]).bindparams(
    sa.bindparam("now", type_=EVENT_KEYS.c.pruned_at.type)
)


def _insert_keys(conn: AsyncConnection) -> postgresql.Insert | sqlite.Insert:
    return dialect.insert(conn, EVENT_KEYS).on_conflict_do_nothing(
        index_elements=["source", "dedupe_key"]
    )


# How many times one batch tries again for keys that were there when it inserted and
# gone when it looked them up (a key expiring at that very moment): each try stores
# them as new. Twice in a row would take two expiries of one key in a few milliseconds.
KEY_RACE_TRIES = 3


@dataclass(slots=True)
class Batch:
    """Rows to insert (first of each key, in key order) and how to answer every input."""

    events: Sequence[NewEvent]
    rows: list[NewRow]
    ids: list[str]
    first_of: dict[tuple[str, str], int]

    def resolve(
        self,
        created: set[str],
        existing: dict[tuple[str, str], str],
        unleased: set[str] | frozenset[str] = frozenset(),
    ) -> list[Stored]:
        """One result per input, in order: new rows (with the row, when it was committed
        leased: not one of ``unleased``, committed pending because its source is paused),
        repeats within the batch, and rows another transaction committed first
        (``existing``)."""
        out: list[Stored] = []
        leased = {
            r["id"]: r
            for r in self.rows
            if r["lease_owner"] is not None and r["id"] not in unleased
        }
        for i, ev in enumerate(self.events):
            key = (ev.source, ev.dedupe_key)
            first = self.first_of[key]
            if self.ids[first] in created:
                event_id = self.ids[first]
                row = leased.get(event_id) if first == i else None
                out.append(Stored(event_id, created=first == i, row=row))
            else:
                out.append(Stored(existing[key], created=False))
        return out

    @staticmethod
    def key(row: NewRow) -> tuple[str, str]:
        return (row["source"], row["dedupe_key"])


def prepare(events: Sequence[NewEvent], cipher: BodyCipher, lease: Lease | None = None) -> Batch:
    """The batch's rows: pending, or, with ``lease``, already claimed by its owner
    (processing, attempt 1), except those of an object ([sources.order])."""
    now = datetime.now(UTC)
    first_of: dict[tuple[str, str], int] = {}
    rows: list[NewRow] = []
    ids: list[str] = []
    # One id per event, minted at once (a repeat of a key in the batch leaves its unused).
    fresh = new_ids(len(events))
    for i, ev in enumerate(events):
        key = (ev.source, ev.dedupe_key)
        if key in first_of:
            ids.append(ids[first_of[key]])
            continue
        first_of[key] = i
        event_id = fresh[i]
        ids.append(event_id)
        body, encrypted = cipher.seal(ev.body)
        leased = lease is not None and ev.object_key is None
        rows.append(
            {
                "id": event_id,
                "source": ev.source,
                "provider": ev.provider,
                "dedupe_key": ev.dedupe_key,
                "type": ev.type,
                "origin": ev.origin,
                "received_at": ev.received_at,
                "occurred_at": ev.occurred_at,
                "verified_with": ev.verified_with,
                "headers": ev.headers,
                "body": body,
                "body_encrypted": encrypted,
                "status": EventStatus.PROCESSING if leased else EventStatus.PENDING,
                "attempts": 1 if leased else 0,
                "next_attempt_at": ev.received_at,
                "created_at": now,
                "updated_at": now,
                "object_key": ev.object_key,
                "object_version": ev.object_version,
                "payload_hash": ev.payload_hash,
                "traceparent": ev.traceparent,
                "lease_owner": lease.owner if leased and lease else None,
                "lease_expires_at": lease.expires_at if leased and lease else None,
            }
        )
    # One lock order for every batch: two concurrent batches that share keys
    # then wait on each other instead of deadlocking (PostgreSQL).
    rows.sort(key=lambda r: (r["source"], r["dedupe_key"]))
    return Batch(events, rows, ids, first_of)


async def insert_events(
    conn: AsyncConnection, events: Sequence[NewEvent], cipher: BodyCipher
) -> list[Stored]:
    """Insert what is new, find what was there; one result per input, in order.

    Runs inside the caller's transaction: nothing is acknowledged until it commits.
    Three statements at most: the keys, the new rows, and (only when some key was
    there already) the ids of the rows those keys belong to, read from ``event_keys``
    so that a key whose row was pruned still answers with the original id.
    """
    batch = prepare(events, cipher)
    created: set[str] = set()
    existing: dict[tuple[str, str], str] = {}
    todo = batch.rows
    for _ in range(KEY_RACE_TRIES):
        result = await conn.execute(
            _insert_keys(conn).returning(EVENT_KEYS.c.event_id), [key_row(r) for r in todo]
        )
        new = {row[0] for row in result}
        if new:
            await conn.execute(sa.insert(EVENTS), [r for r in todo if r["id"] in new])
        created |= new
        missing = [(r["source"], r["dedupe_key"]) for r in todo if r["id"] not in new]
        if not missing:
            break
        found = await conn.execute(
            sa.select(EVENT_KEYS.c.event_id, EVENT_KEYS.c.source, EVENT_KEYS.c.dedupe_key).where(
                sa.tuple_(EVENT_KEYS.c.source, EVENT_KEYS.c.dedupe_key).in_(missing)
            )
        )
        existing |= {(r.source, r.dedupe_key): r.event_id for r in found}
        todo = [r for r in todo if r["id"] not in new and batch.key(r) not in existing]
        if not todo:
            break
    else:
        raise RuntimeError("event keys kept vanishing between insert and lookup")
    return batch.resolve(created, existing)


async def mark_pruned(
    conn: AsyncConnection, rows: Sequence[tuple[str, str, str]], now: datetime
) -> None:
    """Mark the keys of pruned events, given as (source, dedupe_key, final status):
    ``final_status`` and ``pruned_at``, in the transaction that deletes their rows.

    On PostgreSQL one statement joins the batch to the primary key of
    ``event_keys``: a nested loop of unique-key probes whatever the table's size or
    statistics (a ``dedupe_key = ANY(…)`` list could be planned as a scan of every
    key when the planner has no statistics)."""
    if not rows:
        return
    if dialect.is_postgres(conn):
        await conn.execute(
            KEYS_PRUNED_PG,
            {
                "now": now,
                "sources": [r[0] for r in rows],
                "keys": [r[1] for r in rows],
                "statuses": [str(r[2]) for r in rows],
            },
        )
        return
    groups: dict[tuple[str, str], list[str]] = {}
    for source, key, status in rows:
        groups.setdefault((source, str(status)), []).append(key)
    for (source, status), keys in groups.items():
        await conn.execute(
            sa.update(EVENT_KEYS)
            .where(EVENT_KEYS.c.source == source, EVENT_KEYS.c.dedupe_key.in_(keys))
            .values(final_status=status, pruned_at=now)
        )


async def get_tombstone(conn: AsyncConnection, event_id: str) -> Tombstone | None:
    """What is left of an event whose row was pruned: its key, how it ended, when."""
    row = (
        await conn.execute(
            sa.select(
                EVENT_KEYS.c.source,
                EVENT_KEYS.c.dedupe_key,
                EVENT_KEYS.c.final_status,
                EVENT_KEYS.c.received_at,
                EVENT_KEYS.c.pruned_at,
            ).where(EVENT_KEYS.c.event_id == event_id, EVENT_KEYS.c.pruned_at.is_not(None))
        )
    ).first()
    if row is None:
        return None
    return Tombstone(
        event_id, row.source, row.dedupe_key, row.final_status, row.received_at, row.pruned_at
    )


async def get_event(
    conn: AsyncConnection, event_id: str, *, with_body: bool = False
) -> EventRow | None:
    """The event, its body read only ``with_body`` (None in its place otherwise)."""
    cols = EVENT_COLUMNS if with_body else EVENT_COLUMNS_NO_BODY
    row = (await conn.execute(sa.select(*cols).where(EVENTS.c.id == event_id))).first()
    return None if row is None else EventRow._make(row)


async def list_events(
    conn: AsyncConnection,
    *,
    source: str | None = None,
    status: str | None = None,
    type_: str | None = None,
    origin: str | None = None,
    limit: int = 50,
    before_id: str | None = None,
    object_key: str | None = None,
) -> list[EventRow]:
    """Newest first, keyset-paged on the time-ordered id; bodies are not read.
    ``object_key`` (with ``source``): one object's events ([sources.order])."""
    query = sa.select(*EVENT_COLUMNS_NO_BODY).order_by(EVENTS.c.id.desc()).limit(limit)
    if source is not None:
        query = query.where(EVENTS.c.source == source)
    if object_key is not None:
        query = query.where(EVENTS.c.object_key == object_key)
    if status is not None:
        query = query.where(EVENTS.c.status == status)
    if type_ is not None:
        query = query.where(EVENTS.c.type == type_)
    if origin is not None:
        query = query.where(EVENTS.c.origin == origin)
    if before_id is not None:
        query = query.where(EVENTS.c.id < before_id)
    return list(map(EventRow._make, await conn.execute(query)))


async def counts_by_source(
    conn: AsyncConnection, statuses: Sequence[str]
) -> dict[tuple[str, str], int]:
    """How many events each source has in each of ``statuses``: ``{(source, status): n}``."""
    result = await conn.execute(
        sa.select(EVENTS.c.source, EVENTS.c.status, sa.func.count().label("n"))
        .where(EVENTS.c.status.in_(statuses))
        .group_by(EVENTS.c.source, EVENTS.c.status)
    )
    return {(r.source, r.status): r.n for r in result}
