"""When a source is reconciled next: adaptive interval, error backoff with jitter."""

from __future__ import annotations

import random

from hookd.backoff import full_jitter
from hookd.providers.reconciling import ReconcileConfig


def bounds(rc: ReconcileConfig) -> tuple[float, float]:
    low = rc.min_every_s if rc.min_every_s is not None else rc.every_s
    high = rc.max_every_s if rc.max_every_s is not None else rc.every_s
    return low, high


def next_interval(rc: ReconcileConfig, current: float | None, found_missing: bool) -> float:
    """Halve the interval after a run that found misses; grow it by half after clean ones."""
    low, high = bounds(rc)
    interval = current if current is not None else rc.every_s
    interval = interval / 2 if found_missing else interval * 1.5
    return min(high, max(low, interval))


def error_delay(rc: ReconcileConfig, errors: int, rng: random.Random) -> float:
    """Full jitter under an exponentially growing ceiling, capped at the max interval."""
    low, high = bounds(rc)
    base = max(1.0, min(low, 60.0))
    return max(1.0, full_jitter(rng, base, min(errors, 30), high))
