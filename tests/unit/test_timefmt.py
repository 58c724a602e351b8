"""Times as text: ISO 8601, ``Z`` for UTC, as every resource and log line shows them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hookd.timefmt import iso_z, iso_z_or_none


def test_utc_is_written_with_z_and_keeps_its_microseconds() -> None:
    assert iso_z(datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)) == "2026-01-02T03:04:05.123456Z"
    assert iso_z(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05Z"


def test_other_offsets_and_naive_times_keep_their_own_form() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert iso_z(datetime(2026, 1, 2, 3, 4, 5, tzinfo=plus_two)) == "2026-01-02T03:04:05+02:00"
    assert iso_z(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05"


def test_none_stays_none() -> None:
    assert iso_z_or_none(None) is None
    assert iso_z_or_none(datetime(2026, 1, 2, tzinfo=UTC)) == "2026-01-02T00:00:00Z"
