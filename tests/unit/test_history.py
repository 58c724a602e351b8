"""What an event's history keeps of an error: one line, never longer than its column."""

from __future__ import annotations

from store.claims import history
from store.models import EVENT_HISTORY


def test_an_error_is_kept_on_one_line_and_cut_to_the_column_with_an_ellipsis() -> None:
    assert (
        history.one_line("h: ValueError: bad\n  value\tthere") == "h: ValueError: bad value there"
    )
    assert history.one_line(None) is None
    long = history.one_line("x" * 2_000)
    assert long is not None
    assert len(long) == history.ERROR_CHARS == EVENT_HISTORY.c.error.type.length
    assert long.endswith("…")
    exact = "y" * history.ERROR_CHARS
    assert history.one_line(exact) == exact
