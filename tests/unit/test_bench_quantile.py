"""bench/ingest.py reads hookd's own histograms as PromQL's histogram_quantile does."""

from __future__ import annotations

import math

import pytest

from bench.ingest import histogram_quantile

INF = float("inf")


def test_the_rank_is_interpolated_within_its_bucket() -> None:
    after = {0.001: 0.0, 0.01: 50.0, 0.1: 100.0, INF: 100.0}
    assert histogram_quantile({}, after, 0.5) == pytest.approx(0.01)
    assert histogram_quantile({}, after, 0.99) == pytest.approx(0.01 + 0.09 * 49 / 50)
    assert histogram_quantile({}, after, 0.25) == pytest.approx(0.001 + 0.009 * 25 / 50)


def test_only_the_increase_between_the_scrapes_counts() -> None:
    before = {0.001: 0.0, 0.01: 1000.0, 0.1: 1000.0, INF: 1000.0}
    after = {0.001: 0.0, 0.01: 1000.0, 0.1: 1100.0, INF: 1100.0}
    # All 100 new observations fell in (0.01, 0.1]: the old ones do not pull it down.
    assert histogram_quantile(before, after, 0.5) == pytest.approx(0.055)


def test_past_the_last_bound_it_answers_that_bound_and_nothing_is_nan() -> None:
    after = {0.001: 0.0, 0.01: 10.0, INF: 20.0}
    assert histogram_quantile({}, after, 0.99) == 0.01
    assert math.isnan(histogram_quantile(after, after, 0.5))
