"""Event history: what happened to an event, attempt by attempt and replay by replay.

Each processing attempt and each replay adds one row to ``event_history``, in the
transaction that records the attempt's outcome (``processing.processor``) or makes
the replay (``store.claims.claiming.replay``): a crash loses both or neither, so the history
never says more or less than the event's row. The rows of a batch of attempts go in
one statement. They are read back oldest first (by ``id``, which follows the order of
the commits for one event) and go with their event (``ON DELETE CASCADE``; on
PostgreSQL a dropped day partition's rows are deleted with its ledger rows, see
``store.retention.partitions``).

What a row holds is short and never a payload: the error is the one-line summary
stored as the event's ``last_error``, cut to ``ERROR_CHARS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, TypedDict

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import dialect, queries
from store.models import EVENT_HISTORY, utc_binder
from store.values import safe_text

# The longest error summary kept per attempt (the column's length).
ERROR_CHARS = 500


class HistoryKind(StrEnum):
    ATTEMPT = "attempt"  # one claim of the event and its handlers' run
    REPLAY = "replay"  # the event made pending again by hand


class AttemptOutcome(StrEnum):
    """How an attempt ended. The column is a free short word: processing steps that
    end an attempt otherwise (a filter, a pause, ordering) write their own."""

    PROCESSED = "processed"  # every handler finished
    RETRY = "retry"  # failed; due again later
    DEAD = "dead"  # failed, and no attempt is left (or the failure is permanent)
    RELEASED = "released"  # cut short by a shutdown; the attempt was given back
    LEASE_LOST = "lease_lost"  # ran, but its claim had been taken over: no outcome of its own
    ABANDONED = "abandoned"  # its worker stopped or stalled; found by the takeover


@dataclass(frozen=True, slots=True)
class Requester:
    """Who asked for a replay: ``via`` the command line, the API, the admin UI (or a
    bulk operation), and ``by`` with what, when known: ``token:admin``,
    ``session:admin``, ``user:NAME`` (the OS user of the command line)."""

    via: str
    by: str | None = None


UNKNOWN = Requester("unknown")


@dataclass(frozen=True, slots=True)
class Attempt:
    """One processing attempt, as its outcome is recorded."""

    event_id: str
    attempt: int
    worker: str | None  # None: not known (an attempt found abandoned)
    at: datetime
    outcome: str
    finished_at: datetime | None = None
    duration_s: float | None = None
    handler: str | None = None
    error: str | None = None
    error_type: str | None = None


def one_line(text: str | None, limit: int = ERROR_CHARS) -> str | None:
    """``text`` on one line, at most ``limit`` characters (an ellipsis says it was cut)."""
    if text is None:
        return None
    # A handler's error may quote its payload: a NUL or a lone surrogate in it would
    # fail the statement that records the outcomes of every event finished with it.
    return safe_text(" ".join(text.split()), limit)


class _AttemptRow(TypedDict):
    """An attempt as a row of ``event_history``."""

    event_id: str
    kind: str
    at: datetime
    finished_at: datetime | None
    attempt: int
    worker: str | None
    handler: str | None
    outcome: str
    error: str | None
    error_type: str | None
    duration_s: float | None
    status_before: None
    requested_via: None
    requested_by: None


def _attempt_row(a: Attempt) -> _AttemptRow:
    return {
        "event_id": a.event_id,
        "kind": HistoryKind.ATTEMPT.value,
        "at": a.at,
        "finished_at": a.finished_at,
        "attempt": a.attempt,
        "worker": None if a.worker is None else a.worker[:64],
        "handler": None if a.handler is None else a.handler[:255],
        "outcome": str(a.outcome)[:32],
        "error": one_line(a.error),
        "error_type": None if a.error_type is None else a.error_type[:128],
        "duration_s": a.duration_s,
        "status_before": None,
        "requested_via": None,
        "requested_by": None,
    }


SQL = queries.load("history")
ATTEMPTS_PG = sa.text(SQL["attempts_pg"])
ATTEMPTS_SQLITE = SQL["attempts_sqlite"]


def attempt_params(
    attempts: Sequence[Attempt], bind: Callable[[datetime | None], Any]
) -> list[tuple[Any, ...]]:
    """The attempts as SQLite's driver takes them (``ATTEMPTS_SQLITE``), times through
    ``bind``."""
    return [
        (
            r["event_id"],
            r["kind"],
            bind(r["at"]),
            bind(r["finished_at"]),
            r["attempt"],
            r["worker"],
            r["handler"],
            r["outcome"],
            r["error"],
            r["error_type"],
            r["duration_s"],
        )
        for r in map(_attempt_row, attempts)
    ]


async def record_attempts(conn: AsyncConnection, attempts: Sequence[Attempt]) -> None:
    """Add the attempts of a batch, in one statement, in the caller's transaction."""
    if not attempts:
        return
    if not dialect.is_postgres(conn):
        params = attempt_params(attempts, utc_binder(conn.dialect))
        await conn.exec_driver_sql(ATTEMPTS_SQLITE, params)
        return
    rows = [_attempt_row(a) for a in attempts]
    columns = {
        "e": "event_id",
        "a": "at",
        "f": "finished_at",
        "n": "attempt",
        "w": "worker",
        "h": "handler",
        "o": "outcome",
        "r": "error",
        "t": "error_type",
        "d": "duration_s",
    }
    by_name: Sequence[Mapping[str, object]] = rows
    arrays = {k: [r[c] for r in by_name] for k, c in columns.items()}
    await conn.execute(ATTEMPTS_PG, {"kind": HistoryKind.ATTEMPT.value, **arrays})


async def record_replays(
    conn: AsyncConnection,
    replayed: Sequence[tuple[str, int, str]],
    requester: Requester,
    now: datetime,
) -> None:
    """Add a replay marker per (event id, attempts it reset, status it found), in the
    transaction that makes the replay."""
    if not replayed:
        return
    await conn.execute(
        sa.insert(EVENT_HISTORY),
        [
            {
                "event_id": event_id,
                "kind": HistoryKind.REPLAY.value,
                "at": now,
                "finished_at": None,
                "attempt": attempts,
                "worker": None,
                "handler": None,
                "outcome": None,
                "error": None,
                "error_type": None,
                "duration_s": None,
                "status_before": str(status)[:16],
                "requested_via": requester.via[:16],
                "requested_by": None if requester.by is None else requester.by[:128],
            }
            for event_id, attempts, status in replayed
        ],
    )


async def history_of(conn: AsyncConnection, event_id: str) -> list[sa.Row[Any]]:
    """An event's history, oldest first: ``event_history`` rows (``hookd.ops.resources``
    shows them)."""
    result = await conn.execute(
        sa.select(EVENT_HISTORY)
        .where(EVENT_HISTORY.c.event_id == event_id)
        .order_by(EVENT_HISTORY.c.id)
    )
    return list(result)
