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
    # Not run: older than what was already processed for its object ([sources.order]);
    # final like processed, replayable.
    SUPERSEDED = "superseded"


class EventOrigin(StrEnum):
    WEBHOOK = "webhook"  # the provider delivered it
    RECONCILE = "reconcile"  # a reconciliation run found it missing and stored it
    # Allowed by the schema (and the API's filters) but never written: a replay keeps
    # the event's first origin, reruns the same row and adds a replay marker to its
    # history (store.claims.history), so how the event first arrived is never lost.
    REPLAY = "replay"


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


class CoverageOutcome(StrEnum):
    """What the coverage ledger (``reconcile_coverage``) says of one time interval of a
    source (``ck_reconcile_coverage_outcome``, migration 0009)."""

    COMPLETE = "complete"  # a run checked it and found nothing missing
    REPAIRED = "repaired"  # a run checked it and repaired ``repaired`` missing events
    FAILED = "failed"  # a run set out to check it and failed: a later run checks it again
    UNRECOVERABLE = "unrecoverable"  # beyond the provider's retention when a run came to it
    NOT_CHECKED = "not_checked"  # the source's reconciliation was disabled meanwhile
    # [sources.expect]: fewer webhooks than expected were received in it (migration 0020)
    SILENT = "silent"


# Outcomes that cover their interval: everything the provider listed there is stored.
COVERING_OUTCOMES: tuple[CoverageOutcome, ...] = (
    CoverageOutcome.COMPLETE,
    CoverageOutcome.REPAIRED,
)


# Claimable once due: the order is the one ix_events_runnable's predicate spells.
RUNNABLE_STATUSES: tuple[EventStatus, ...] = (EventStatus.PENDING, EventStatus.RETRYING)
# Nothing more will happen to the event unless it is replayed.
DONE_STATUSES: tuple[EventStatus, ...] = (
    EventStatus.PROCESSED,
    EventStatus.DEAD,
    EventStatus.SUPERSEDED,
)

# A run that has not recorded its end yet.
UNFINISHED_RUN_STATUSES: tuple[RunStatus, ...] = (RunStatus.QUEUED, RunStatus.RUNNING)
# A run that recorded its end.
DONE_RUN_STATUSES: tuple[RunStatus, ...] = (
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.LEASE_HELD,
)


class OperationStatus(StrEnum):
    """A bulk operation's state (``ck_operations_status``, migration 0012)."""

    QUEUED = "queued"  # recorded; no runner has taken it yet
    RUNNING = "running"  # a runner holds (or held, until it expires) its lease
    SUCCEEDED = "succeeded"  # went over every event of its filter (or a dry run)
    FAILED = "failed"  # stopped by an error it could not get past
    CANCELLED = "cancelled"  # stopped by hand; its progress says how far it got


class OperationAction(StrEnum):
    """What a bulk operation does to each event its filter selects (``ck_operations_action``)."""

    REPLAY = "replay"  # run the event's handlers again, as a single replay does
    CANCEL = "cancel"  # a pending or retrying event is made dead, reason "cancelled"


# An operation that recorded its end.
DONE_OPERATION_STATUSES: tuple[OperationStatus, ...] = (
    OperationStatus.SUCCEEDED,
    OperationStatus.FAILED,
    OperationStatus.CANCELLED,
)
# An operation a runner still has to take or finish.
UNFINISHED_OPERATION_STATUSES: tuple[OperationStatus, ...] = (
    OperationStatus.QUEUED,
    OperationStatus.RUNNING,
)


class BreakerState(StrEnum):
    """A destination's circuit breaker (``ck_destination_breakers_state``, migration 0011).
    The order is the metric's: ``hookd_destination_breaker_state`` is the member's index."""

    CLOSED = "closed"  # deliveries go out
    HALF_OPEN = "half_open"  # one delivery probes; the others wait for its outcome
    OPEN = "open"  # deliveries wait (no attempt used) until the cool-down ends


class LedgerOutcome(StrEnum):
    """``handler_runs.outcome`` besides null (it ran and finished). No CHECK constraint
    holds these; the code is the only writer."""

    SKIPPED = "skipped"  # its filter did not select the event


class AlertStatus(StrEnum):
    """An alert's state (``ck_alerts_status``, migration 0017)."""

    OPEN = "open"  # the condition holds and nobody has said they are on it
    ACKNOWLEDGED = "acknowledged"  # a person is on it: no reminders
    RESOLVED = "resolved"  # by hand, or the condition cleared


class NotificationStatus(StrEnum):
    """A queued message's state (``ck_notifications_status``, migration 0017)."""

    PENDING = "pending"  # to be sent (again, after a failure, at next_attempt_at)
    SENT = "sent"
    FAILED = "failed"  # refused for good, or out of attempts


def sql_in(column: str, values: tuple[StrEnum, ...]) -> str:
    """``column IN ('a', 'b')``: a predicate written as SQL text (a partial index's).
    The values are the fixed words above, none with a quote in it."""
    quoted = ", ".join(f"'{v}'" for v in values)
    return f"{column} IN ({quoted})"
