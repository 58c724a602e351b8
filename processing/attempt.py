"""What one attempt at an event is made of: the event held, its result, the retry policy.

Shared by the processor's slot loop (``processing.processor``), the run of an event
(``processing.running``), its claim (``processing.claiming``) and the writing of its
outcome (``processing.outcomes``).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hookd.backoff import full_jitter
from hookd.event import Event
from store.claims import history
from store.delivery.destinations import Blocker
from store.rows import EventRow


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter: uniform(0, min(cap, base · 2^(n-1)))."""

    base_s: float = 1.0
    cap_s: float = 600.0

    def delay_s(self, attempt: int, rng: random.Random) -> float:
        return full_jitter(rng, self.base_s, min(max(attempt - 1, 0), 60), self.cap_s)


@dataclass(slots=True, eq=False)
class Held:
    """An event this processor holds the lease of: read ahead, running, or finished
    with its outcome waiting for the next window."""

    row: EventRow
    finished: frozenset[str]  # the ledger when it was claimed: handlers not to run again
    lease_end: float  # monotonic: when its lease, as last renewed, runs out
    claim: Any = None  # the claim's span (tracing on), linked from the attempt's span
    done: list[str] = field(default_factory=list)  # finished in this attempt, for the ledger
    task: asyncio.Task[None] | None = None


@dataclass(frozen=True, slots=True)
class Result:
    """One event's pass: all handlers done, or the failure to record.

    ``error`` is the one-line summary stored on the event; ``handler`` the handler
    that raised (None when processing failed outside the handlers) and
    ``error_type`` the exception's type name, stored beside it.
    """

    ok: bool
    error: str | None = None
    handler: str | None = None
    error_type: str | None = None
    permanent: bool = False
    # Set by ``EventRunner.guarded``: when the attempt started, and how long it ran.
    started_at: datetime | None = None
    duration_s: float | None = None
    # Destinations (``EventRunner.combined``): handlers and destinations the filter left
    # out; a failure's attempt limit and retry delay when a destination set them; and
    # for a pass that only put deliveries off (``ok`` false, no ``error``): when to try
    # again, or what the event is parked behind.
    skipped: tuple[str, ...] = ()
    max_attempts: int | None = None
    retry_in_s: float | None = None
    until: datetime | None = None
    blockers: tuple[Blocker, ...] = ()


def event_of(row: EventRow, body: bytes) -> Event:
    """The ``Event`` handlers get for a stored row (its idempotency key set per handler)."""
    return Event(
        id=row.id,
        source=row.source,
        provider=row.provider,
        type=row.type,
        dedupe_key=row.dedupe_key,
        origin=row.origin,
        received_at=row.received_at,
        occurred_at=row.occurred_at,
        headers=dict(row.headers),
        body=body,
        object_key=row.object_key,
    )


def attempt_outcome(result: Result, retry_at: datetime | None) -> str | None:
    """The outcome an attempt's history records: what it left the event in."""
    if result.ok:
        return history.AttemptOutcome.PROCESSED
    if result.error is not None:
        return history.AttemptOutcome.DEAD if retry_at is None else history.AttemptOutcome.RETRY
    return None
