"""The store's rows as the resources of ``hookd.ops.models``: the one place a row
becomes what the API answers, the admin UI shows and the command line prints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import sqlalchemy as sa

from hookd.ops import models
from reconcile import coverage
from store.admin.operations import OperationRow
from store.claims.history import HistoryKind
from store.delivery.destinations import BreakerRow, PauseRow
from store.reconcile import audit
from store.rows import EventRow, RunRow, SourceObjectRow, SourceStateRow
from store.status import (
    DONE_OPERATION_STATUSES,
    DONE_RUN_STATUSES,
    DONE_STATUSES,
    BreakerState,
    EventOrigin,
    EventStatus,
    OperationAction,
    OperationStatus,
    RunStatus,
    RunTrigger,
)


def event_of(row: EventRow) -> models.Event:
    """An event, shaped like a long-running operation: ``name`` (``events/ID``), ``done``
    once processed, dead or superseded, ``error`` and ``poll_after_seconds`` (null once
    done) for a client that polls it."""
    done = row.status in DONE_STATUSES
    return models.Event(
        name=f"events/{row.id}",
        id=row.id,
        source=row.source,
        provider=row.provider,
        type=row.type,
        dedupe_key=row.dedupe_key,
        origin=EventOrigin(row.origin),
        status=EventStatus(row.status),
        done=done,
        attempts=row.attempts,
        received_at=row.received_at,
        occurred_at=row.occurred_at,
        processed_at=row.processed_at,
        verified_with=row.verified_with,
        object_key=row.object_key,
        object_version=row.object_version,
        payload_hash=row.payload_hash,
        error=event_error(row),
        poll_after_seconds=None if done else 1,
    )


def event_error(row: EventRow) -> models.EventError | None:
    """The last failed attempt's error, while the event retries and once it is dead
    (processing and replay clear it): the summary line, the handler that raised
    (None when processing failed outside the handlers) and the exception type."""
    if not row.last_error:
        return None
    return models.EventError(
        message=row.last_error, handler=row.last_error_handler, type=row.last_error_type
    )


def history_entry(row: sa.Row[Any]) -> models.HistoryAttempt | models.HistoryReplay:
    """One ``event_history`` row."""
    if row.kind == HistoryKind.REPLAY:
        return models.HistoryReplay(
            kind="replay",
            at=row.at,
            attempts_reset=row.attempt,
            status_before=row.status_before,
            via=row.requested_via,
            by=row.requested_by,
        )
    return models.HistoryAttempt(
        kind="attempt",
        at=row.at,
        finished_at=row.finished_at,
        attempt=row.attempt,
        worker=row.worker,
        outcome=row.outcome,
        handler=row.handler,
        error=row.error,
        error_type=row.error_type,
        duration_s=None if row.duration_s is None else round(row.duration_s, 6),
    )


def event_detail_of(row: EventRow, history: list[sa.Row[Any]]) -> models.EventDetail:
    """An event with its history, oldest first."""
    return models.EventDetail(**dict(event_of(row)), history=[history_entry(h) for h in history])


def run_of(row: RunRow) -> models.ReconcileRun:
    """A reconciliation run, shaped like a long-running operation."""
    return models.ReconcileRun(
        name=f"reconcile-runs/{row.id}",
        id=row.id,
        source=row.source,
        status=RunStatus(row.status),
        done=row.status in DONE_RUN_STATUSES,
        trigger=RunTrigger(row.trigger),
        dry_run=row.dry_run,
        started_at=row.started_at,
        finished_at=row.finished_at,
        items_checked=row.items_checked,
        items_missing=row.items_missing,
        items_repaired=row.items_repaired,
        items_late=row.items_late,
        pages=row.pages,
        api_calls=row.api_calls,
        rate_limited=row.rate_limited,
        cursor_before=row.cursor_before,
        cursor_after=row.cursor_after,
        error=row.error,
        ack_violations=row.ack_violations,
        registration=run_registration(row.registration_ok, row.registration_problems),
    )


def run_registration(
    ok: bool | None, problems: Sequence[str] | None
) -> models.RunRegistration | None:
    """A run's registration check (None: it made none). One that could not read the
    registration recorded why as its only problem."""
    if ok is None and not problems:
        return None
    if ok is None:
        reason = "; ".join(problems or ())
        return models.RunRegistration(
            ok=None, state=registration_state(None), reason=reason, problems=[]
        )
    return models.RunRegistration(
        ok=ok, state=registration_state(ok), reason=None, problems=list(problems or ())
    )


def registration_state(ok: bool | None) -> models.RegistrationState:
    """A registration check's state word: read and as configured, read and drifted, or
    not read (``ok`` None)."""
    if ok is None:
        return audit.REGISTRATION_UNREAD
    return audit.REGISTRATION_OK if ok else audit.REGISTRATION_DRIFT


def source_registration(state: SourceStateRow | None) -> models.SourceRegistration | None:
    """A source's last registration check (None: never checked)."""
    if state is None or state.registration_checked_at is None:
        return None
    kept = state.registration
    ok = state.registration_ok
    return models.SourceRegistration(
        ok=ok,
        state=registration_state(ok),
        reason=kept.get("reason") if kept and ok is None else None,
        checked_at=state.registration_checked_at,
        problems=list(kept.get("problems") or ()) if kept else [],
        registered=dict(kept.get("registered") or {}) if kept else {},
    )


def source_reconcile(
    state: SourceStateRow | None, last_run: RunRow | None, violations: int
) -> models.SourceReconcile:
    """A reconciled source's state: on or off (who switched it off, when and why), its
    cursor and schedule, its last run and registration check, the acknowledgements found
    broken."""
    off = state is not None and state.disabled
    return models.SourceReconcile(
        state="disabled" if off else "active",
        reason=None if state is None else state.disabled_reason,
        cursor=None if state is None else state.cursor,
        interval_s=None if state is None else state.interval_s,
        next_run_at=None if state is None else state.next_run_at,
        last_run=None if last_run is None else run_of(last_run),
        disabled_at=state.disabled_at if off and state else None,
        disabled_by=state.disabled_by if off and state else None,
        registration=source_registration(state),
        ack_violations=violations,
    )


def pause_of(row: PauseRow | None) -> models.PauseSwitch | None:
    """The last switch: paused or resumed, by whom, when and why (None: never switched)."""
    if row is None:
        return None
    return models.PauseSwitch(
        paused=row.paused, by=row.changed_by, at=row.changed_at, reason=row.reason
    )


def breaker_of(row: BreakerRow | None, enabled: bool) -> models.Breaker:
    """A destination's circuit breaker (``disabled`` when its configuration turns it off)."""
    if not enabled:
        state = "disabled"
    else:
        state = BreakerState.CLOSED.value if row is None else str(row.state)
    return models.Breaker(
        state=cast(models.BreakerStateName, state),
        failures=0 if row is None else row.failures,
        opened_at=None if row is None else row.opened_at,
        retry_at=None if row is None else row.retry_at,
        reason=None if row is None else row.reason,
    )


def object_of(
    source: str, key: str, row: SourceObjectRow | None, counts: dict[str, int]
) -> models.SourceObject:
    """An object: its latest known state (null fields until an event of it was
    processed) and how many of its events are in each status."""
    return models.SourceObject(
        name=f"sources/{source}/objects/{key}",
        source=source,
        key=key,
        latest_type=None if row is None else row.type,
        version=None if row is None else row.version,
        last_event_id=None if row is None else row.event_id,
        payload_hash=None if row is None else row.payload_hash,
        updated_at=None if row is None else row.updated_at,
        events={status: counts.get(status, 0) for status in EventStatus},
    )


def operation_of(row: OperationRow) -> models.Operation:
    """A bulk operation, shaped like a long-running operation (``name``, ``done``,
    ``error``): every filter key, null when not given."""
    done = row.status in DONE_OPERATION_STATUSES
    error = None
    if row.status in (OperationStatus.FAILED, OperationStatus.CANCELLED):
        code = cast(models.OperationErrorCode, row.status)
        error = models.OperationError(code=code, message=row.error or row.status)
    return models.Operation(
        name=f"operations/{row.id}",
        id=row.id,
        request_id=row.request_id,
        action=OperationAction(row.action),
        trigger=cast(models.Trigger, row.trigger),
        dry_run=row.dry_run,
        filter=models.OperationFilter.model_validate(
            {key: row.filter.get(key) for key in models.OperationFilter.model_fields}
        ),
        status=OperationStatus(row.status),
        done=done,
        progress=models.OperationProgress(
            total=row.total,
            done=row.done_count,
            changed=row.changed_count,
            skipped=row.skipped_count,
        ),
        error=error,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        cancel_requested_at=row.cancel_requested_at,
        poll_after_seconds=None if done else 1,
    )


def coverage_of(report: coverage.Report) -> models.Coverage:
    """A coverage report: the range's checked intervals and holes, with their reasons."""
    checked = sum(s.seconds for s in report.spans if s.checked)
    return models.Coverage(
        source=report.source,
        since=coverage.at(report.since),
        until=coverage.at(report.until),
        covered=report.covered,
        checked_seconds=round(checked, 3),
        unchecked_seconds=round(sum(s.seconds for s in report.holes), 3),
        settle_s=report.situation.settle_s,
        retention_s=report.situation.retention_s,
        intervals=[_interval(s) for s in report.spans],
    )


def _interval(span: coverage.Span) -> models.CoverageInterval:
    """A checked interval says by how many runs and what they repaired; a hole, why."""
    start, end = coverage.at(span.start), coverage.at(span.end)
    seconds = round(span.seconds, 3)
    if span.checked:
        return models.CoverageInterval(
            from_=start,
            to=end,
            seconds=seconds,
            state="checked",
            runs=len(span.records),
            repaired=span.repaired,
        )
    reasons = [
        models.CoverageReason(
            kind=cast(models.CoverageKind, r.kind), detail=r.detail, run_id=r.run_id
        )
        for r in span.reasons
    ]
    return models.CoverageInterval(
        from_=start, to=end, seconds=seconds, state="hole", reasons=reasons
    )
