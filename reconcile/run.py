"""What one reconciliation run knows about itself: its source, the state it started
from, the window of provider time it judges, what it has not yet counted, and the
coverage ledger's records of it (``store.reconcile.coverage``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from hookd.providers.reconciling import ReconcileConfig
from hookd.sources import Source
from reconcile import audit, coverage
from reconcile.http import Api
from store.reconcile import coverage as ledger
from store.status import CoverageOutcome

log = logging.getLogger("hookd.reconcile")

# How a window left a hole by items a run could not judge is said in the ledger (a
# ``failed`` record: a later run, from the same cursor, checks it again).
UNJUDGED_PREFIX = "unjudged:"
# How long the cursor waits at such a window: until the window is this wide, later runs
# check it again (a late webhook may settle a timeless item). Past it, the cursor moves
# on, so one item the provider will always list unjudged cannot hold every later run
# to ever longer listings; its window stays a hole in the ledger, for a person to judge.
UNJUDGED_HOLD_S = 86_400.0


@dataclass
class Run:
    source: Source
    current: Any
    id: str
    trigger: str
    dry_run: bool
    started: datetime
    acks: audit.AckAudit = field(init=False)
    # [from, to) of provider time this run judges, once planned; and what lies between
    # the cursor and the provider's retention, when the cursor fell behind it.
    window: tuple[float, float] | None = field(default=None, init=False)
    lost: tuple[float, float] | None = field(default=None, init=False)
    # Why listed items could not be judged (or stored), and how many each time: a
    # window with any is recorded a hole, not checked (``record_checked``).
    unjudged: dict[str, int] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.acks = audit.AckAudit(self.source.name, self.id, self.dry_run)

    @property
    def until(self) -> float:
        assert self.window is not None
        return self.window[1]

    def plan(self, now: float, earliest: float | None = None) -> tuple[float, float]:
        """The window this run judges, started at ``now``: from the cursor less
        ``overlap_s`` (the first run: ``lookback_s`` back, or from ``earliest``, where
        the ledger begins, when earlier runs set out from there and none succeeded),
        kept inside the provider's retention, to ``now - settle_s``. A cursor (or that
        ledger start) behind that retention leaves the interval between the two
        ``lost``: recorded unrecoverable if the run succeeds. The first run's own
        look-back is kept inside it without a word: nothing before it was promised."""
        rc = self.rc
        cursor = self.current.cursor
        floor = now - coverage.retention_s(self.source) + coverage.RETENTION_MARGIN_S
        start = cursor
        if start is None:
            start = now - rc.lookback_s
            if earliest is not None and earliest < start:
                # Failed first runs set out from there: start where they did, not
                # leaving a sliver between their start and this one's look-back.
                start = earliest + rc.overlap_s
                if earliest < floor:
                    self.lost = (earliest, floor)
        elif cursor < floor:
            self.lost = (cursor, floor)
        since = max(start - rc.overlap_s, floor)
        self.window = (since, max(since, now - coverage.settle_s(self.source)))
        return self.window

    def note_unjudged(self, reason: str) -> None:
        self.unjudged[reason] = self.unjudged.get(reason, 0) + 1

    @property
    def unjudged_count(self) -> int:
        return sum(self.unjudged.values())

    def unjudged_reason(self) -> str:
        """The hole's words: how many listed items could not be judged, and why."""
        said = "; ".join(f"{reason} ({n})" for reason, n in sorted(self.unjudged.items()))
        n = self.unjudged_count
        return (
            f"{UNJUDGED_PREFIX} {n} listed item{'s' if n != 1 else ''} could not be judged "
            f"or stored: {said}; "
            + (
                "the cursor has moved on: judge this window by hand"
                if self.moves_on
                else "a later run checks this window again"
            )
        )

    @property
    def moves_on(self) -> bool:
        """Whether the cursor passes a window left unjudged: it has waited long enough
        (``UNJUDGED_HOLD_S``)."""
        assert self.window is not None
        return self.window[1] - self.window[0] >= UNJUDGED_HOLD_S

    @property
    def rc(self) -> ReconcileConfig:
        rc = self.source.config.reconcile
        assert rc is not None
        return rc


class Tally:
    """API calls and rate-limit waits not yet written to the run record."""

    def __init__(self, api: Api) -> None:
        self._api = api
        self._calls = 0
        self._limited = 0

    def take(self) -> dict[str, int]:
        calls, limited = self._api.calls - self._calls, self._api.rate_limited - self._limited
        self._calls, self._limited = self._api.calls, self._api.rate_limited
        return {"api_calls": calls, "rate_limited": limited}


async def record_checked(conn: AsyncConnection, run: Run, repaired: int, now: datetime) -> None:
    """The interval the run checked, and before it what fell out of the provider's
    retention since the cursor (in the transaction that moves the cursor)."""
    if run.lost is not None:
        lost_from, lost_to = run.lost
        reason = (
            f"beyond {run.source.provider}'s retention "
            f"({coverage.retention_s(run.source) / coverage.DAY_S:g} days) when this "
            "run came to it: nothing there can be listed any more"
        )
        await _record(conn, run, run.lost, CoverageOutcome.UNRECOVERABLE, now, reason=reason)
        log.warning(
            "interval beyond the provider's retention",
            extra={
                "source": run.source.name,
                "run_id": run.id,
                "lost_from": lost_from,
                "lost_to": lost_to,
            },
        )
    assert run.window is not None
    if run.unjudged:
        # Never checked while something listed in it was not judged: a hole that says
        # why, and the cursor stays (``Reconciler._succeeded``).
        reason = run.unjudged_reason()
        await _record(
            conn, run, run.window, CoverageOutcome.FAILED, now, repaired=repaired, reason=reason
        )
        log.warning(
            "listed items could not be judged: the window is left a hole",
            extra={"source": run.source.name, "run_id": run.id, "unjudged": run.unjudged_count},
        )
        return
    outcome = CoverageOutcome.REPAIRED if repaired else CoverageOutcome.COMPLETE
    await _record(conn, run, run.window, outcome, now, repaired=repaired)


async def record_failed(conn: AsyncConnection, run: Run, reason: str, now: datetime) -> None:
    """The interval a run set out to check and did not (a later run checks it)."""
    if run.dry_run or run.window is None:
        return
    await _record(conn, run, run.window, CoverageOutcome.FAILED, now, reason=reason)


async def _record(
    conn: AsyncConnection,
    run: Run,
    interval: tuple[float, float],
    outcome: str,
    now: datetime,
    *,
    repaired: int = 0,
    reason: str | None = None,
) -> None:
    """One interval of provider time in the run's coverage ledger."""
    start, end = interval
    await ledger.record(
        conn,
        source=run.source.name,
        run_id=run.id,
        start=coverage.at(start),
        end=coverage.at(end),
        outcome=outcome,
        now=now,
        repaired=repaired,
        reason=reason,
    )
