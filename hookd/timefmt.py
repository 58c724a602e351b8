"""The one way hookd writes a moment as text: ISO 8601 in UTC, ``Z`` for the offset.

API resources, the admin UI's data and the JSON log lines all show times this way
(``2026-01-02T03:04:05.123456Z``), so an operator can compare them character for
character. It sits in the lowest layer because the store's resources and the log
formatter both need it, and neither may import the other.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso_z(value: datetime) -> str:
    """``value.isoformat()`` with a UTC offset written as ``Z``; the microseconds
    stay when there are any. A naive or non-UTC value keeps its own form."""
    return value.isoformat().replace("+00:00", "Z")


def iso_z_or_none(value: datetime | None) -> str | None:
    """``iso_z`` for a column that may be NULL."""
    return None if value is None else iso_z(value)


def iso_z_seconds(value: float | None) -> str | None:
    """Unix seconds (a reconciliation cursor, a window's end) as ``iso_z`` writes a
    moment, in UTC; None stays None."""
    return None if value is None else iso_z(datetime.fromtimestamp(value, UTC))
