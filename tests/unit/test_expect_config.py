"""[sources.expect]: its keys and their one-line errors, which windows ``hours`` lets
be judged, and the ``coverage_hole`` alert's rule for silent holes."""

from __future__ import annotations

import pytest

from hookd.ops.alerts import _alerting
from hookd.sources.expect import ExpectConfig
from tests.support.sources_file import error_of, parse

SOURCE = '[[sources]]\nname = "acme"\nprovider = "github"\nsecrets = ["s"]\n'
TABLE = SOURCE + "[sources.expect]\n"
H = 3600


def expect_of(text: str) -> ExpectConfig:
    found = parse(TABLE + text).get("acme")
    assert found is not None and found.config.expect is not None
    return found.config.expect


def test_a_source_without_the_table_is_not_watched_and_the_defaults() -> None:
    found = parse(SOURCE).get("acme")
    assert found is not None and found.config.expect is None
    expect = expect_of("")
    assert (expect.min_events, expect.window_s, expect.hours, expect.like_last_week) == (
        1,
        3600,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("window_s = 0", "key 'expect.window_s': must be 1 or more"),
        ("window_s = 604801", "key 'expect.window_s': must be 604800 or less"),
        ("window_s = 1.5", "key 'expect.window_s': must be a whole number"),
        ("min_events = 0", "key 'expect.min_events': must be 1 or more"),
        ('hours = "8-20"', "key 'expect.hours': must be UTC hours as \"HH:MM-HH:MM\""),
        ('hours = "08:00-24:01"', "key 'expect.hours': must be UTC hours as \"HH:MM-HH:MM\""),
        ('hours = "08:60-20:00"', "key 'expect.hours': must be UTC hours as \"HH:MM-HH:MM\""),
        ('hours = "08:00-08:00"', "key 'expect.hours': starts where it ends"),
        ("like_last_week = 0", "key 'expect.like_last_week': must be greater than 0"),
        ("like_last_week = 1.5", "key 'expect.like_last_week': must be 1 or less"),
        ("windows = 60", "key 'expect.windows': unknown key (did you mean 'window_s'?)"),
        (
            'hours = "08:00-09:00"\nwindow_s = 7200',
            "key 'expect': window_s = 7200 is longer than hours 08:00-09:00 (3600 s)",
        ),
    ],
)
def test_each_bad_value_is_one_line_naming_its_key(text: str, said: str) -> None:
    message = error_of(TABLE + text)
    assert message.startswith("hookd.toml: source 'acme': ")
    assert said in message


def test_windows_are_judged_only_wholly_inside_the_hours() -> None:
    day = expect_of('hours = "08:00-20:00"\nwindow_s = 3600')
    assert [h for h in range(24) if day.judged(19 * 86_400 + h * H)] == list(range(8, 20))
    night = expect_of('hours = "22:00-06:00"\nwindow_s = 7200')
    judged = [h for h in range(0, 24, 2) if night.judged(h * H)]
    assert judged == [0, 2, 4, 22]
    every = expect_of("window_s = 60")
    assert every.judged(0) and every.judged(12345 * 60)
    assert every.window_start(125.0) == 120


def test_a_silent_hole_alerts_only_while_the_silence_goes_on() -> None:
    assert _alerting({"silent"}, 100.0, 50.0)
    assert not _alerting({"silent"}, 100.0, None)  # heard from again
    assert not _alerting({"silent"}, 100.0, 100.0)  # an earlier silence's hole
    assert _alerting({"silent", "pending"}, 100.0, 0.0)
    assert not _alerting({"silent", "settling"}, 100.0, None)
    assert _alerting({"silent", "failed"}, 100.0, None)  # a run failed there too
    assert _alerting({"failed"}, 100.0, None) and not _alerting({"pending"}, 100.0, None)
