"""The circuit breaker's failure-rate window (``processing.breaker.Recent``): what
it counts is the deliveries of the last ``window_s`` seconds, no older."""

from __future__ import annotations

import types

import pytest

from processing import breaker
from processing.breaker import Recent


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(breaker, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    return now


def test_the_window_counts_recent_deliveries_and_their_failures(clock: list[float]) -> None:
    recent = Recent(window_s=60)
    assert recent.add(failed=True) == (1, 1)
    clock[0] += 10
    assert recent.add(failed=False) == (2, 1)
    clock[0] += 49.5
    assert recent.add(failed=True) == (3, 2)


def test_deliveries_older_than_the_window_no_longer_count(clock: list[float]) -> None:
    recent = Recent(window_s=60)
    for _ in range(5):
        recent.add(failed=True)
        clock[0] += 1
    clock[0] += 60  # the five failures are now 61 to 65 s old
    assert recent.add(failed=False) == (1, 0)
    clock[0] += 30
    assert recent.add(failed=True) == (2, 1)
