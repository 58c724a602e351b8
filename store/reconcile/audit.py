"""What reconciliation audits besides missing events: acknowledgements the provider
says hookd gave for events the store does not hold (the ``ack_violations`` ledger),
the provider's registration of the webhook endpoint, and who switched a source's
reconciliation off.

The ledger has one row per (source, dedupe key): a run that reads a broken
acknowledgement again (its overlap, a dry run before it, the next run after a
failed one) finds it recorded and counts nothing new.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import dialect
from store.models import ACK_VIOLATIONS, RECONCILE_RUNS, RECONCILE_STATE
from store.rows import RegistrationRecord

# disabled_by of the automatic stop after authentication failures.
AUTO_DISABLED_BY = "hookd auth-failures"
CHUNK = 500


@dataclass(frozen=True, slots=True)
class Acked:
    """One delivery the provider says the receiver answered with a 2xx."""

    key: str
    delivery: str | None = None
    status_code: int | None = None
    delivered_at: datetime | None = None


async def recorded_violations(conn: AsyncConnection, source: str, keys: Iterable[str]) -> set[str]:
    """The ``keys`` of ``source`` already in the ledger."""
    wanted = sorted(set(keys))
    found: set[str] = set()
    for start in range(0, len(wanted), CHUNK):
        result = await conn.execute(
            sa.select(ACK_VIOLATIONS.c.dedupe_key).where(
                ACK_VIOLATIONS.c.source == source,
                ACK_VIOLATIONS.c.dedupe_key.in_(wanted[start : start + CHUNK]),
            )
        )
        found.update(row[0] for row in result)
    return found


async def record_violations(
    conn: AsyncConnection, source: str, run_id: str, found: Sequence[Acked], now: datetime
) -> list[Acked]:
    """Add ``found`` to the ledger; the ones that were not in it yet."""
    if not found:
        return []
    added: set[str] = set()
    for start in range(0, len(found), CHUNK):
        rows = [
            {
                "source": source,
                "dedupe_key": a.key,
                "run_id": run_id,
                "delivery": a.delivery,
                "status_code": a.status_code,
                "delivered_at": a.delivered_at,
                "found_at": now,
            }
            for a in found[start : start + CHUNK]
        ]
        result = await conn.execute(
            dialect.insert(conn, ACK_VIOLATIONS)
            .values(rows)
            .on_conflict_do_nothing(index_elements=["source", "dedupe_key"])
            .returning(ACK_VIOLATIONS.c.dedupe_key)
        )
        added.update(row[0] for row in result)
    return [a for a in found if a.key in added]


async def violation_totals(conn: AsyncConnection) -> dict[str, int]:
    """Per source, the broken acknowledgements ever found (``hookd_ack_violations_total``)."""
    result = await conn.execute(
        sa.select(ACK_VIOLATIONS.c.source, sa.func.count()).group_by(ACK_VIOLATIONS.c.source)
    )
    return {source: int(count) for source, count in result}


# A registration check's outcome, as the API, the admin and the CLI name it:
# as expected, differs (drift), or the registration could not be read (the API was
# unreachable, refused the token, answered nonsense): then nothing is known of it,
# and it is neither ok nor drift.
REGISTRATION_OK: Final = "ok"
REGISTRATION_DRIFT: Final = "drift"
REGISTRATION_UNREAD: Final = "could_not_check"


async def record_registration(
    conn: AsyncConnection,
    source: str,
    *,
    ok: bool,
    problems: Sequence[str],
    registered: dict[str, object],
    now: datetime,
    run_id: str | None = None,
    unread: str | None = None,
) -> None:
    """The source's latest registration check (and the run's, when a run made it).

    ``unread``: why the registration could not be read. Then ``registration_ok`` is
    NULL (neither as expected nor not), ``registration_checked_at`` is the attempt's
    time and ``registration`` says ``could_not_check`` and why; on the run,
    ``registration_ok`` is NULL and ``registration_problems`` holds that one reason (a
    run with neither made no check)."""
    if unread is not None:
        state: RegistrationRecord = {
            "ok": None,
            "state": REGISTRATION_UNREAD,
            "reason": unread,
            "problems": [],
            "registered": {},
        }
        run_ok, run_problems = None, [unread]
    else:
        state = {
            "ok": ok,
            "state": REGISTRATION_OK if ok else REGISTRATION_DRIFT,
            "reason": None,
            "problems": list(problems),
            "registered": registered,
        }
        run_ok, run_problems = ok, list(problems)
    await conn.execute(
        sa.update(RECONCILE_STATE)
        .where(RECONCILE_STATE.c.source == source)
        .values(registration_ok=state["ok"], registration_checked_at=now, registration=state)
    )
    if run_id is not None:
        await conn.execute(
            sa.update(RECONCILE_RUNS)
            .where(RECONCILE_RUNS.c.id == run_id)
            .values(registration_ok=run_ok, registration_problems=run_problems)
        )


async def disable(
    conn: AsyncConnection, source: str, *, reason: str, by: str, now: datetime
) -> bool:
    """Switch reconciliation of ``source`` off by hand; False when it already was off
    (its first reason, time and author stay). The state row must exist."""
    result = await conn.execute(
        sa.update(RECONCILE_STATE)
        .where(RECONCILE_STATE.c.source == source, RECONCILE_STATE.c.disabled == sa.false())
        .values(
            disabled=True,
            disabled_reason=reason,
            disabled_at=now,
            disabled_by=by,
            updated_at=now,
        )
    )
    return bool(result.rowcount)
