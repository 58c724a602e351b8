"""``[sources.expect]``: how often a source's sender is expected to be heard from.

A source with the table is watched (``reconcile.silence``): time is cut into windows of
``window_s`` seconds, aligned on the unix epoch (a window of 3600 s is a UTC hour), and
each window that has ended is judged once: it is **silent** when fewer than
``min_events`` webhooks of the source were received in it, or, with
``like_last_week``, fewer than that fraction of those received in the same window a
week before. With ``hours`` (UTC, ``"08:00-20:00"``; ``"22:00-06:00"`` spans midnight)
only the windows wholly inside those hours are judged.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

WEEK_S = 7 * 86_400
DAY_S = 86_400
# The longest window: a week (the same window a week before must have ended).
MAX_WINDOW_S = WEEK_S
_HOURS = re.compile(r"([0-9]{2}):([0-9]{2})-([0-9]{2}):([0-9]{2})")


def _minute(hour: str, minute: str, *, end: bool) -> int | None:
    h, m = int(hour), int(minute)
    if m > 59 or h > 24 or (h == 24 and (m or not end)):
        return None
    return h * 60 + m


class ExpectConfig(BaseModel):
    """``[sources.expect]``: see the module's text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # At least this many webhooks per window.
    min_events: int = Field(default=1, ge=1, le=1_000_000_000)
    window_s: int = Field(default=3600, ge=1, le=MAX_WINDOW_S)
    # UTC "HH:MM-HH:MM": only windows inside these hours are judged.
    hours: str | None = None
    # Also silent when a window has fewer than this fraction of the same window a week before.
    like_last_week: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)

    @field_validator("hours")
    @classmethod
    def _hours(cls, value: str | None) -> str | None:
        if value is None:
            return value
        found = _HOURS.fullmatch(value.strip())
        start = end = None
        if found is not None:
            start = _minute(found.group(1), found.group(2), end=False)
            end = _minute(found.group(3), found.group(4), end=True)
        if start is None or end is None:
            raise ValueError(
                'must be UTC hours as "HH:MM-HH:MM", e.g. "08:00-20:00" ("22:00-06:00" '
                "spans midnight)"
            )
        if start == end % (24 * 60):
            raise ValueError(
                "starts where it ends: give two different times, or remove hours to judge "
                "every window"
            )
        return value.strip()

    @model_validator(mode="after")
    def _window_fits(self) -> ExpectConfig:
        span = self.hours_span()
        if span is not None and self.window_s > (span[1] - span[0]) % DAY_S:
            length = (span[1] - span[0]) % DAY_S
            raise ValueError(
                f"window_s = {self.window_s} is longer than hours {self.hours} ({length} s): "
                "no window would ever be judged; shorten window_s or widen hours"
            )
        return self

    def hours_span(self) -> tuple[int, int] | None:
        """``hours`` as (start, end) seconds of the UTC day (end may be 86400)."""
        if self.hours is None:
            return None
        found = _HOURS.fullmatch(self.hours)
        assert found is not None  # validated
        start = int(found.group(1)) * 3600 + int(found.group(2)) * 60
        end = int(found.group(3)) * 3600 + int(found.group(4)) * 60
        return start, end

    def window_start(self, moment: float) -> float:
        """The start of the window ``moment`` (unix seconds) lies in."""
        return math.floor(moment / self.window_s) * self.window_s

    def judged(self, start: float) -> bool:
        """Whether the window starting at ``start`` is judged: always without ``hours``;
        with them, when it lies wholly inside them."""
        span = self.hours_span()
        if span is None:
            return True
        begin, end = span
        offset = start % DAY_S  # seconds into its UTC day
        if begin < end:
            return begin <= offset and offset + self.window_s <= end
        # Across midnight: inside [begin, 24:00) or [00:00, end).
        if offset >= begin:
            return offset + self.window_s <= DAY_S + end
        return offset + self.window_s <= end

    def describe(self) -> str:
        """The expectation in words, as a silent hole's detail says it."""
        events = f"{self.min_events} event{'' if self.min_events == 1 else 's'}"
        said = f"fewer than {events} received in a {self.window_s} s window"
        if self.like_last_week is not None:
            said += f", or fewer than {self.like_last_week:g} times the same window last week"
        if self.hours is not None:
            said += f" (windows inside {self.hours} UTC)"
        return said
