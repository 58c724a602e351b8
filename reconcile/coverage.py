"""What a source's reconciliation covers: its settle window and the provider's
retention, and the coverage ledger merged into checked intervals and holes.

The ledger (``store.reconcile.coverage``) holds what happened; this module says what it
amounts to for a range of time, at a given moment:

- a moment is **checked** when some run recorded an interval over it as ``complete``
  or ``repaired`` (later failures of other runs over it change nothing);
- every other moment is a **hole**, with each reason that applies: a run ``failed``
  there (also a run that succeeded but listed items it could not judge: its reason
  begins ``unjudged:``), it was ``unrecoverable`` (beyond the provider's retention when
  a run came to it), ``not_checked`` (the source was disabled; also said of a source
  disabled right now, from its cursor on), ``beyond_retention`` (older than the provider
  keeps: no run can check it any more), ``settling`` (younger than the settle window: a
  run judges it later), ``pending`` (after the last checked moment: the next run's work;
  also what a past disable's window still holds from the cursor on once a good run has
  moved the cursor into it), ``not_recorded`` (no record: no run has covered it yet,
  or before the ledger's records), or ``silent`` (``[sources.expect]``: fewer webhooks
  than expected came in it; ``reconcile.silence``).

A source with ``[sources.expect]`` and no ``[sources.reconcile]`` has only its silence
watch to go by (``Situation.heard_until``): there a moment the watch judged
(from its start to ``heard_until``) that no silent record covers is checked, the
sender having been heard from; after ``heard_until`` it is ``pending``.

Adjacent pieces with the same state and reasons are merged.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from hookd.sources import Source
from store.reconcile.coverage import CoverageRow
from store.status import COVERING_OUTCOMES, CoverageOutcome

DAY_S = 86_400.0
# How far inside the provider's retention a run starts listing: what it lists must
# still be there when its last page is read (Stripe drops events as they turn 30 days).
RETENTION_MARGIN_S = 60.0

# Reasons a hole gives besides the ledger's own outcomes.
BEYOND_RETENTION = "beyond_retention"
SETTLING = "settling"
PENDING = "pending"
NOT_RECORDED = "not_recorded"
# Holes that runs fill as the schedule goes on, without anyone doing anything.
IN_DUE_COURSE = frozenset({SETTLING, PENDING})


def settle_s(source: Source) -> float:
    """How old an event must be before a run of ``source`` judges it, in seconds."""
    rc = source.config.reconcile
    spec = source.adapter.reconcile
    if rc is None or spec is None:
        return 0.0
    return spec.settle_for(rc)


def retention_s(source: Source) -> float:
    """How far back the provider's list API reaches for ``source``, in seconds."""
    rc = source.config.reconcile
    spec = source.adapter.reconcile
    days = rc.list_retention_days() if rc is not None else None
    if days is None and spec is not None:
        days = spec.retention_days
    if days is None:
        days = source.adapter.redelivery_horizon_days
    return days * DAY_S


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


@dataclass(frozen=True, slots=True)
class Reason:
    kind: str  # a CoverageOutcome's value, or one of the reasons above
    detail: str | None = None
    run_id: str | None = None


@dataclass(slots=True)
class Span:
    """A piece of the asked range: checked (by the runs of ``records``, which repaired
    ``repaired`` events in it) or a hole (for ``reasons``)."""

    start: float
    end: float
    checked: bool
    reasons: list[Reason] = field(default_factory=list)
    # The ledger rows that checked it, by id, in order (a dict: an ordered set).
    records: dict[str, None] = field(default_factory=dict)
    repaired: int = 0

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Situation:
    """What the ledger cannot say: the moment asked at and the source's state then."""

    now: float
    settle_s: float
    retention_s: float
    # Where the source's cursor is (None before its first run succeeded).
    cursor: float | None = None
    # Set when the source's reconciliation is disabled right now: why.
    disabled: str | None = None
    # Where the source's coverage ledger begins (None: it has no record yet); for a
    # source only watched for silence, where its watch began.
    ledger_start: float | None = None
    # A source only watched for silence (no reconciliation): the end of the last window
    # its watch judged.
    heard_until: float | None = None


@dataclass(frozen=True, slots=True)
class Report:
    source: str
    since: float
    until: float
    spans: list[Span]
    situation: Situation

    @property
    def holes(self) -> list[Span]:
        return [s for s in self.spans if not s.checked]

    @property
    def covered(self) -> bool:
        return not self.holes

    @property
    def only_due(self) -> bool:
        """Every hole is one the schedule fills by itself (settling, pending)."""
        return all({r.kind for r in s.reasons} <= IN_DUE_COURSE for s in self.holes)


def _ts(moment: datetime) -> float:
    return moment.timestamp()


def merge(
    source: str,
    rows: Iterable[CoverageRow],
    since: float,
    until: float,
    situation: Situation,
) -> Report:
    """The ledger's ``rows`` over ``[since, until)``, merged (see the module's text)."""
    if until <= since:
        return Report(source, since, until, [], situation)
    records = sorted(
        (r for r in rows if _ts(r.end_at) > since and _ts(r.start_at) < until),
        key=lambda r: _ts(r.start_at),
    )
    spans = _sweep(_cuts(records, since, until, situation), records, situation)
    for r in records:  # each checking record lies inside one checked span
        if r.outcome in COVERING_OUTCOMES:
            next(s for s in spans if r.id in s.records).repaired += r.repaired
    return Report(source, since, until, spans, situation)


def _cuts(
    records: Sequence[CoverageRow], since: float, until: float, sit: Situation
) -> list[float]:
    """Every moment where what covers the range may change: the range's ends, each
    record's ends inside it, and the retention, settle and cursor edges."""
    cuts = {since, until}
    for r in records:
        cuts |= {max(_ts(r.start_at), since), min(_ts(r.end_at), until)}
    edges = [sit.now - sit.retention_s, sit.now - sit.settle_s, sit.cursor]
    if sit.heard_until is not None:
        edges += [sit.heard_until, sit.ledger_start]
    for edge in edges:
        if edge is not None and since < edge < until:
            cuts.add(edge)
    return sorted(cuts)


def _sweep(bounds: Sequence[float], records: Sequence[CoverageRow], sit: Situation) -> list[Span]:
    """A sweep over the cuts: every record starts and ends on one, so each piece
    between two cuts lies wholly inside or wholly outside each record."""
    active: dict[str, CoverageRow] = {}
    upcoming = iter(records)
    waiting = next(upcoming, None)
    spans: list[Span] = []
    for start, end in itertools.pairwise(bounds):
        while waiting is not None and _ts(waiting.start_at) <= start:
            active[waiting.id] = waiting
            waiting = next(upcoming, None)
        for gone in [k for k, r in active.items() if _ts(r.end_at) <= start]:
            del active[gone]
        checks = [r for r in active.values() if r.outcome in COVERING_OUTCOMES]
        if checks:
            piece = Span(start, end, True, records=dict.fromkeys(r.id for r in checks))
        elif not active and _heard(start, sit):
            piece = Span(start, end, True)
        else:
            piece = Span(start, end, False, reasons=_reasons(list(active.values()), start, sit))
        _append(spans, piece)
    return spans


def _heard(start: float, sit: Situation) -> bool:
    """A source only watched for silence: the watch judged this moment."""
    return (
        sit.heard_until is not None
        and sit.ledger_start is not None
        and sit.ledger_start <= start < sit.heard_until
    )


def _reasons(over: Sequence[CoverageRow], start: float, sit: Situation) -> list[Reason]:
    reasons: list[Reason] = []
    seen: set[tuple[str, str | None]] = set()
    # A past disable's window (recorded from the cursor of then to the enable): once a
    # good run has moved the cursor into it, what is left of it from the cursor on is
    # the next runs' work (pending, settling), not time lost to the disable.
    ahead = sit.cursor is not None and start >= sit.cursor and sit.disabled is None
    for r in sorted(over, key=lambda r: (r.recorded_at, r.id)):
        if (
            ahead
            and r.outcome == CoverageOutcome.NOT_CHECKED
            and sit.cursor is not None
            and sit.cursor > _ts(r.start_at)
        ):
            continue
        # One reason per outcome and text: a run that failed ten times says it once,
        # as the last one to fail.
        key = (r.outcome, r.reason)
        if key in seen:
            continue
        seen.add(key)
        reasons.append(Reason(r.outcome, r.reason, r.run_id))
    if sit.disabled is not None and (sit.cursor is None or start >= sit.cursor):
        reasons.append(Reason(CoverageOutcome.NOT_CHECKED, f"disabled: {sit.disabled}"))
    if start < sit.now - sit.retention_s:
        reasons.append(
            Reason(BEYOND_RETENTION, f"older than the provider keeps ({_days(sit.retention_s)})")
        )
    elif start >= sit.now - sit.settle_s:
        reasons.append(
            Reason(
                SETTLING,
                f"not judged yet: younger than the settle window ({sit.settle_s:g} s); "
                "a run judges it later",
            )
        )
    elif not reasons and sit.cursor is not None and start >= sit.cursor:
        reasons.append(Reason(PENDING, "after the last checked moment: the next run checks it"))
    elif not reasons and sit.heard_until is not None and start >= sit.heard_until:
        reasons.append(Reason(PENDING, "the window under way: the watch judges it when it ends"))
    if not reasons:
        reasons.append(Reason(NOT_RECORDED, _unrecorded(start, sit)))
    return _ordered(reasons)


def _unrecorded(start: float, sit: Situation) -> str:
    """Why a moment no record covers has none. A run that dies never moves the cursor,
    so what it left is after the cursor (``pending``): before the cursor, a missing
    record is one made before the ledger began, or since removed by retention."""
    if sit.ledger_start is None or (sit.cursor is None and start >= sit.ledger_start):
        return "no run covered this yet"
    if start < sit.ledger_start:
        return "no record: before the coverage ledger began"
    return "no record: before the ledger's records (begun later, or pruned by retention)"


def _ordered(reasons: list[Reason]) -> list[Reason]:
    """Most telling first, then by order of appearance: the loss, then the cause."""
    rank = {
        CoverageOutcome.UNRECOVERABLE: 0,
        BEYOND_RETENTION: 1,
        CoverageOutcome.NOT_CHECKED: 2,
        CoverageOutcome.FAILED: 3,
        CoverageOutcome.SILENT: 3,
        NOT_RECORDED: 4,
        PENDING: 5,
        SETTLING: 6,
    }
    return sorted(reasons, key=lambda r: rank.get(r.kind, 9))


def _append(spans: list[Span], piece: Span) -> None:
    """Add ``piece``, merged into the last span when it goes on with the same state."""
    last = spans[-1] if spans else None
    if (
        last is not None
        and last.end == piece.start
        and last.checked == piece.checked
        and last.reasons == piece.reasons
    ):
        last.end = piece.end
        last.records.update(piece.records)
    else:
        spans.append(piece)


def _days(seconds: float) -> str:
    days = f"{round(seconds / DAY_S, 3):g}"
    return f"{days} day" if days == "1" else f"{days} days"


def unchecked(sit: Situation, first: float | None) -> tuple[float, float]:
    """``hookd_source_unchecked_seconds`` and ``hookd_reconcile_retention_margin_seconds``
    of a source, from its cursor (or, before its first successful run, the start of its
    ledger ``first``).

    Everything before the cursor was checked or recorded as a hole by the run that
    moved it there, and a run never moves it past what it did not judge: so the time
    not covered that a run can still check is ``[cursor, now - settle)``, clipped to
    the provider's retention. The margin is how long until the oldest moment of it
    falls out of that retention. Both are 0 before any run (nothing is known yet, as
    ``hookd_reconcile_lag_seconds``): alerts on the margin also ask for unchecked time."""
    oldest = sit.cursor if sit.cursor is not None else first
    if oldest is None:
        return 0.0, 0.0
    reach = sit.now - sit.retention_s
    oldest = max(oldest, reach)
    gap = max(0.0, sit.now - sit.settle_s - oldest)
    return gap, max(0.0, oldest - reach)
