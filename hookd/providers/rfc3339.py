"""RFC 3339 / ISO 8601 times in payloads, and signature timestamp headers written that way.

Paddle (``occurred_at``), Square (``created_at``) and Zendesk (``time`` and its
signature timestamp header) write moments as ``2024-03-15T10:32:38.286848Z``, some
with nanoseconds (``2022-07-13T20:30:59.037339943Z``), which ``datetime`` cannot
hold; the digits past the microsecond are dropped. ``parse_iso8601`` also reads the
looser forms Shopify, GitLab and Linear write: ``2013-12-03 17:23:34 UTC`` (GitLab),
an offset without a colon, or no offset at all (taken as UTC).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

from hookd.errors import SignatureError
from hookd.providers.signatures import check_window

# Date, time, an optional fraction of any length, and the offset (Z or ±hh:mm).
RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)
ISO8601 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?"
    r"\s*(?:([Zz]|UTC)|([+-])(\d{2}):?(\d{2}))?",
    re.ASCII,
)
# What a signature timestamp header must look like: UTC, written with ``Z``.
UTC_Z = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?Z", re.ASCII)
MAX_OFFSET_MINUTES = 24 * 60


def _moment(match: re.Match[str] | None) -> datetime | None:
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    micros = int((match.group(7) or "0").ljust(6, "0")[:6])
    tz = UTC
    if match.group(9) is not None:
        minutes = int(match.group(10)) * 60 + int(match.group(11))
        if minutes >= MAX_OFFSET_MINUTES:
            return None
        sign = -1 if match.group(9) == "-" else 1
        tz = timezone(timedelta(minutes=sign * minutes))
    try:
        moment = datetime(year, month, day, hour, minute, second, micros, tzinfo=tz)
    except ValueError:  # 2024-02-30, 25:00:00, a leap second
        return None
    return moment.astimezone(UTC)


def parse_rfc3339(value: object) -> datetime | None:
    """An aware UTC datetime for an RFC 3339 string, or None for anything else
    (a payload's time is informative: an odd one is left out, not refused)."""
    return _moment(RFC3339.fullmatch(value)) if isinstance(value, str) else None


def parse_iso8601(value: object) -> datetime | None:
    """``parse_rfc3339``, also taking the looser forms (see the module's text)."""
    return _moment(ISO8601.fullmatch(value.strip())) if isinstance(value, str) else None


def parse_isoformat(value: object) -> datetime | None:
    """What ``datetime.fromisoformat`` reads (``2021-04-26T17:36:27.458Z``), in UTC, a
    time without an offset taken as UTC; None for anything else."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def parse_utc_timestamp(raw: str, now: float, tolerance_s: int) -> int:
    """A ``YYYY-MM-DDThh:mm:ss[.fraction]Z`` header inside ``now ± tolerance_s`` (both
    edges inclusive, ``now`` keeping its fraction, as ``parse_timestamp`` compares), as
    whole seconds since the epoch, or ``malformed_timestamp``/``timestamp_too_old``/
    ``timestamp_in_future``."""
    if UTC_Z.fullmatch(raw) is None:
        raise SignatureError("malformed_timestamp")
    moment = parse_rfc3339(raw)
    if moment is None:
        raise SignatureError("malformed_timestamp")
    ts = moment.timestamp()
    check_window(ts, now, tolerance_s)
    return int(ts // 1)


def epoch(text: str) -> float:
    """An RFC 3339 time as a list API writes it, in unix seconds (``Z`` or an offset; a
    time without one is UTC; fractional digits past the sixth are dropped)."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def utc_z(at: float) -> str:
    """``2024-01-02T03:04:05.678901Z``: unix seconds as a list API's filter takes them."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
