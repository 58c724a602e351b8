"""Pure pieces of judging what a provider's list API answers: the order an answer is
seen in, times written the way the API descriptions' own examples write them, and
where a run's window starts."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from hookd.providers.square import created_at
from hookd.sources import parse_sources
from reconcile.providers.base import NewestFirst
from reconcile.providers.paddle import notification_doubt, notified_at
from reconcile.run import UNJUDGED_HOLD_S, UNJUDGED_PREFIX, Run

DAY = 86_400.0


def seen(times: list[float]) -> NewestFirst:
    order = NewestFirst()
    for t in times:
        order.saw(t)
    return order


def test_newest_first_only_once_seen_going_down_and_never_up() -> None:
    assert seen([5, 4, 4, 1]).seen
    assert not seen([]).seen
    assert not seen([3]).seen  # one time says nothing of the order
    assert not seen([2, 2]).seen
    assert not seen([1, 2, 3]).seen  # oldest first
    assert not seen([5, 4, 6]).seen  # no order


def test_a_listing_ends_only_on_a_page_wholly_before_the_window_of_a_seen_order() -> None:
    order = seen([50, 40, 30, 9, 8])
    assert not order.ends([30, 9, 8], since=10)  # part of it inside the window
    order.saw(7)
    order.saw(6)
    assert order.ends([7, 6], since=10)
    assert not order.ends([], since=10)
    ascending = seen([1, 2, 3])
    assert not ascending.ends([1, 2, 3], since=10)  # oldest first: read on


def test_square_created_at_without_a_zone_is_utc() -> None:
    # Square's SearchEvents response example writes it so.
    expected = datetime(2022, 4, 26, 10, 8, 40, 454726, UTC)
    assert created_at("2022-04-26T10:08:40.454726") == expected
    assert created_at("2022-04-26T10:08:40.454726Z") == expected
    assert created_at("2022-04-26T12:08:40.454726+02:00") == expected
    assert created_at("2022-07-13T20:30:59.037339943Z") == datetime(
        2022, 7, 13, 20, 30, 59, 37339, UTC
    )
    assert created_at("yesterday") is None
    assert created_at(None) is None


def test_paddle_notification_fields_its_schema_does_not_require() -> None:
    full: dict[str, Any] = {
        "id": "ntf_01",
        "occurred_at": "2024-04-12T10:18:49.621022Z",
        "payload": {"event_id": "evt_01", "occurred_at": "2024-04-12T10:18:48.000000Z"},
    }
    assert notification_doubt(full, "evt_01", redeliver=True) is None  # type: ignore[arg-type]
    by_payload = {**full, "occurred_at": None}
    assert notified_at(by_payload) == datetime(2024, 4, 12, 10, 18, 48, tzinfo=UTC)  # type: ignore[arg-type]
    timeless = {"id": "ntf_01", "payload": {"event_id": "evt_01"}}
    assert "without occurred_at" in str(notification_doubt(timeless, "evt_01", False))  # type: ignore[arg-type]
    nameless = {"occurred_at": full["occurred_at"], "payload": {}}
    assert "event_id" in str(notification_doubt(nameless, None, False))  # type: ignore[arg-type]
    idless = {k: v for k, v in full.items() if k != "id"}
    assert notification_doubt(idless, "evt_01", redeliver=False) is None  # type: ignore[arg-type]
    assert "cannot be replayed" in str(notification_doubt(idless, "evt_01", True))  # type: ignore[arg-type]


SOURCES = """
[[sources]]
name = "gh"
provider = "github"
secrets = ["s"]

[sources.reconcile]
token = "t"
hook = "repos/o/r/hooks/1"
lookback_s = 86400
overlap_s = 60
"""


def run_of(cursor: float | None) -> Run:
    source = parse_sources(SOURCES, None, env={}).get("gh")
    assert source is not None
    current = SimpleNamespace(cursor=cursor)
    return Run(source, current, "R", "cli", False, datetime.now(UTC))


def test_a_first_run_starts_where_failed_first_runs_set_out() -> None:
    now, cursor = 1_800_000_000.0, None
    plain = run_of(cursor)
    assert plain.plan(now)[0] == now - DAY - 60
    after_failures = run_of(cursor)
    earliest = now - DAY - 5 * 3600
    assert after_failures.plan(now, earliest)[0] == earliest
    assert after_failures.lost is None
    # Their start fell out of GitHub's retention meanwhile: from there on it is lost.
    late = run_of(cursor)
    since, _ = late.plan(now, now - 40 * DAY)
    assert late.lost == (now - 40 * DAY, since)
    # A later ledger start than the look-back changes nothing.
    assert run_of(cursor).plan(now, now - 3600)[0] == now - DAY - 60


def test_a_run_with_a_cursor_ignores_where_the_ledger_begins() -> None:
    now = 1_800_000_000.0
    assert run_of(now - 600).plan(now, now - 2 * DAY)[0] == now - 660


def test_a_window_left_unjudged_holds_the_cursor_for_a_day_then_moves_on() -> None:
    now = 1_800_000_000.0
    recent = run_of(now - 3600)
    recent.plan(now)
    recent.note_unjudged("GitLab logged a hook event without created_at")
    assert not recent.moves_on
    assert recent.unjudged_reason().endswith("a later run checks this window again")
    # A day of later runs could not judge it either: the hole stays, the cursor goes.
    stuck = run_of(now - UNJUDGED_HOLD_S)
    stuck.plan(now)
    stuck.note_unjudged("GitLab logged a hook event without created_at")
    stuck.note_unjudged("GitLab logged a hook event without created_at")
    assert stuck.moves_on
    reason = stuck.unjudged_reason()
    assert reason.startswith(f"{UNJUDGED_PREFIX} 2 listed items")
    assert reason.endswith("the cursor has moved on: judge this window by hand")
