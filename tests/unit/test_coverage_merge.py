"""The coverage ledger merged into checked intervals and holes (``reconcile.coverage``),
and the two gauges read from a source's cursor."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from hookd.ops.resources import coverage_of
from reconcile.coverage import Situation, merge, unchecked
from store.reconcile.coverage import CoverageRow

DAY = 86_400.0
NOW = 1_800_000_000.0
_ids = itertools.count(1)


def row(
    start: float, end: float, outcome: str, repaired: int = 0, reason: str | None = None
) -> CoverageRow:
    n = next(_ids)
    return CoverageRow(
        id=f"01J{n:023d}",
        source="s",
        run_id=f"01K{n:023d}",
        start_at=datetime.fromtimestamp(start, UTC),
        end_at=datetime.fromtimestamp(end, UTC),
        outcome=outcome,
        repaired=repaired,
        reason=reason,
        recorded_at=datetime.fromtimestamp(end, UTC),
    )


def situation(cursor: float | None = None, disabled: str | None = None) -> Situation:
    return Situation(now=NOW, settle_s=60.0, retention_s=3 * DAY, cursor=cursor, disabled=disabled)


def shape(report_spans: list) -> list[tuple[float, float, str, tuple[str, ...]]]:
    return [
        (s.start, s.end, "checked" if s.checked else "hole", tuple(r.kind for r in s.reasons))
        for s in report_spans
    ]


def test_overlapping_checked_runs_merge_into_one_interval_with_their_repairs_summed() -> None:
    base = NOW - DAY
    rows = [
        row(base, base + 100, "complete"),
        row(base + 90, base + 200, "repaired", repaired=3),
        row(base + 190, base + 300, "repaired", repaired=2),
    ]
    report = merge("s", rows, base, base + 300, situation(cursor=base + 300))
    assert report.covered
    [span] = report.spans
    assert (span.start, span.end, len(span.records), span.repaired) == (base, base + 300, 3, 5)


def test_a_failed_run_is_no_hole_where_a_later_run_checked_the_same_time() -> None:
    base = NOW - DAY
    rows = [row(base, base + 100, "failed", reason="bad_answer"), row(base, base + 100, "complete")]
    assert merge("s", rows, base, base + 100, situation(cursor=base + 100)).covered


def test_holes_keep_each_reason_and_split_where_the_reasons_change() -> None:
    base = NOW - 5 * DAY
    rows = [
        row(base, base + 100, "complete"),
        row(base + 100, NOW - 3 * DAY + 60, "unrecoverable", reason="beyond retention"),
        row(base + 100, NOW, "not_checked", reason="reconciliation disabled: by hand"),
        row(NOW - 3 * DAY + 60, NOW - 60, "complete"),
    ]
    report = merge("s", rows, base, NOW - 60, situation(cursor=NOW - 60))
    assert shape(report.spans) == [
        (base, base + 100, "checked", ()),
        (base + 100, NOW - 3 * DAY, "hole", ("unrecoverable", "beyond_retention", "not_checked")),
        (NOW - 3 * DAY, NOW - 3 * DAY + 60, "hole", ("unrecoverable", "not_checked")),
        (NOW - 3 * DAY + 60, NOW - 60, "checked", ()),
    ]
    assert not report.covered and not report.only_due


def test_time_after_the_cursor_is_pending_then_settling() -> None:
    cursor = NOW - 600
    rows = [row(NOW - 3600, cursor, "complete")]
    report = merge("s", rows, NOW - 3600, NOW, situation(cursor=cursor))
    assert shape(report.spans) == [
        (NOW - 3600, cursor, "checked", ()),
        (cursor, NOW - 60, "hole", ("pending",)),
        (NOW - 60, NOW, "hole", ("settling",)),
    ]
    assert report.only_due


def test_a_source_disabled_now_shows_its_unchecked_time_as_not_checked() -> None:
    cursor = NOW - 3600
    report = merge(
        "s", [row(NOW - 7200, cursor, "complete")], NOW - 7200, NOW - 60, situation(cursor, "auth")
    )
    assert shape(report.spans)[-1] == (cursor, NOW - 60, "hole", ("not_checked",))
    assert report.spans[-1].reasons[0].detail == "disabled: auth"
    assert not report.only_due


def test_time_no_record_speaks_of_is_a_hole_not_recorded() -> None:
    report = merge("s", [], NOW - 7200, NOW - 3600, situation(cursor=NOW - 60))
    assert shape(report.spans) == [(NOW - 7200, NOW - 3600, "hole", ("not_recorded",))]


def test_the_report_resource_says_covered_and_counts_seconds() -> None:
    rows = [row(NOW - 3600, NOW - 1800, "complete")]
    report = merge("s", rows, NOW - 3600, NOW - 60, situation(cursor=NOW - 1800))
    resource: Any = coverage_of(report).answer()
    assert resource["covered"] is False
    assert resource["checked_seconds"] == 1800.0
    assert resource["unchecked_seconds"] == 1740.0
    assert [i["state"] for i in resource["intervals"]] == ["checked", "hole"]
    assert resource["intervals"][1]["reasons"][0]["kind"] == "pending"


def test_unchecked_seconds_and_margin_follow_the_cursor() -> None:
    gap, margin = unchecked(situation(cursor=NOW - DAY - 60), None)
    assert (gap, margin) == (DAY, 2 * DAY - 60)


def test_a_cursor_behind_the_retention_leaves_no_margin() -> None:
    gap, margin = unchecked(situation(cursor=NOW - 10 * DAY), None)
    assert (gap, margin) == (3 * DAY - 60, 0.0)


def test_before_any_run_both_are_zero_and_then_count_from_the_ledgers_start() -> None:
    assert unchecked(situation(), None) == (0.0, 0.0)
    assert unchecked(situation(), NOW - DAY) == (DAY - 60, 2 * DAY)


# -- [sources.expect]: silent windows -----------------------------------------------------


def watched(start: float, heard_until: float) -> Situation:
    """A source only watched for silence: its watch began at ``start``."""
    return Situation(
        now=NOW, settle_s=0.0, retention_s=3 * DAY, ledger_start=start, heard_until=heard_until
    )


def test_a_watched_source_is_checked_where_heard_and_a_hole_where_silent() -> None:
    base = NOW - 3600
    rows = [row(base + 600, base + 1200, "silent", reason="fewer than 1 event")]
    report = merge("s", rows, base, base + 1800, watched(base, base + 1800))
    assert shape(report.spans) == [
        (base, base + 600, "checked", ()),
        (base + 600, base + 1200, "hole", ("silent",)),
        (base + 1200, base + 1800, "checked", ()),
    ]
    assert not report.covered and not report.only_due
    assert report.holes[0].reasons[0].detail == "fewer than 1 event"
    # A range of heard windows only is covered; the window under way is pending.
    assert merge("s", rows, base, base + 600, watched(base, base + 1800)).covered
    tail = merge("s", [], base + 1200, base + 2400, watched(base, base + 1800))
    assert shape(tail.spans) == [
        (base + 1200, base + 1800, "checked", ()),
        (base + 1800, base + 2400, "hole", ("pending",)),
    ]
    assert tail.only_due
    # Before the watch began nothing is known: no record.
    before = merge("s", [], base - 600, base, watched(base, base + 1800))
    assert shape(before.spans) == [(base - 600, base, "hole", ("not_recorded",))]


def test_a_silent_window_of_a_reconciled_source_is_a_hole_until_a_run_checks_it() -> None:
    base = NOW - DAY
    silent = row(base + 100, base + 200, "silent", reason="fewer than 1 event")
    report = merge("s", [silent], base, base + 300, situation(cursor=base))
    assert [s.reasons[0].kind for s in report.holes] == ["pending", "silent", "pending"]
    assert not report.only_due
    checked = row(base, base + 300, "complete")
    assert merge("s", [silent, checked], base, base + 300, situation(cursor=base + 300)).covered


def test_the_api_names_the_silent_reason() -> None:
    base = NOW - 3600
    rows = [row(base, base + 60, "silent", reason="fewer than 1 event")]
    answer = coverage_of(merge("s", rows, base, base + 60, watched(base, base + 60))).answer()
    assert answer["intervals"][0]["reasons"][0]["kind"] == "silent"
