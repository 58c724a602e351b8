"""The shared back-off arithmetic gives what each caller wrote out before it was shared."""

from __future__ import annotations

import random

import pytest

from hookd.backoff import capped, full_jitter


@pytest.mark.parametrize("exponent", [0, 1, 5, 9, 10, 30, 60])
def test_capped_is_base_times_a_power_of_two_under_the_cap(exponent: int) -> None:
    assert capped(0.5, exponent, 30.0) == min(30.0, 0.5 * 2**exponent)
    assert capped(1.0, exponent, 600.0) == min(600.0, 1.0 * 2**exponent)


@pytest.mark.parametrize("exponent", [0, 1, 4, 12, 60])
def test_full_jitter_is_one_uniform_draw_under_the_capped_ceiling(exponent: int) -> None:
    ours, theirs = random.Random(7), random.Random(7)
    for _ in range(50):
        got = full_jitter(ours, 1.5, exponent, 600.0)
        assert got == theirs.uniform(0, min(600.0, 1.5 * 2**exponent))
        assert 0 <= got <= min(600.0, 1.5 * 2**exponent)


def test_capped_survives_a_failure_count_that_grew_for_hours() -> None:
    """A loop that failed 5,000 times in a row gets the cap, not an OverflowError."""
    assert capped(1.0, 5_000, 30.0) == 30.0
    assert 0 <= full_jitter(random.Random(1), 1.0, 5_000, 600.0) <= 600.0
