"""The closed sets of words the tables store: an event's status and origin, a
reconciliation run's status and trigger, and the groups of statuses that mean
something (runnable, done, unfinished).

The values are the database's own: the CHECK constraints of the migrations
(``ck_events_status``, ``ck_events_origin``, ``ck_reconcile_runs_status``) allow
exactly these, and a unit test keeps the two equal. Being ``StrEnum``s, members
compare and hash equal to the plain strings read back from a row, and bind as
those strings.

The groups are tuples, not sets: they go into ``IN (…)`` lists, and a fixed order
keeps the SQL the same in every process (a set's order follows string hashing,
which differs from one process to the next).
"""

from __future__ import annotations

from enum import StrEnum


class EventStatus(StrEnum):
    PENDING = "pending"  # stored, never tried
    PROCESSING = "processing"  # claimed: a worker holds its lease
    RETRYING = "retrying"  # an attempt failed; due again at next_attempt_at
    PROCESSED = "processed"  # every handler finished
    DEAD = "dead"  # no attempt left, or a permanent failure; replayable


class EventOrigin(StrEnum):
    WEBHOOK = "webhook"  # the provider delivered it
    RECONCILE = "reconcile"  # a reconciliation run found it missing and stored it
    REPLAY = "replay"  # allowed by the schema; nothing writes it (a replay reruns the row)


class RunStatus(StrEnum):
    QUEUED = "queued"  # recorded for the API to answer with; not started yet
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LEASE_HELD = "lease_held"  # another run of the source held the lease


class RunTrigger(StrEnum):
    """Who started a run. No CHECK constraint holds these; the code is the only writer."""

    CLI = "cli"
    SCHEDULE = "schedule"
    API = "api"


# Claimable once due: the order is the one ix_events_runnable's predicate spells.
RUNNABLE_STATUSES: tuple[EventStatus, ...] = (EventStatus.PENDING, EventStatus.RETRYING)
# Nothing more will happen to the event unless it is replayed.
DONE_STATUSES: tuple[EventStatus, ...] = (EventStatus.PROCESSED, EventStatus.DEAD)

# A run that has not recorded its end yet.
UNFINISHED_RUN_STATUSES: tuple[RunStatus, ...] = (RunStatus.QUEUED, RunStatus.RUNNING)
# A run that recorded its end.
DONE_RUN_STATUSES: tuple[RunStatus, ...] = (
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.LEASE_HELD,
)


def sql_in(column: str, values: tuple[StrEnum, ...]) -> str:
    """``column IN ('a', 'b')``: a predicate written as SQL text (a partial index's).
    The values are the fixed words above, none with a quote in it."""
    quoted = ", ".join(f"'{v}'" for v in values)
    return f"{column} IN ({quoted})"
