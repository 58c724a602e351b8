"""Exponential back-off, capped: with full jitter for the processor's retries, a
reconciliation run's error delay and the provider API client's retries of a server
error; without it for a process's own loop waiting for its database or Redis to come
back (the in-process consumer, the worker's supervisor), whose waits were never jittered.

Full jitter (a uniform draw from zero up to the ceiling) spreads the retries of
many callers that failed together, so they do not come back together. What each
caller backs off from, how fast and up to what, stays its own policy; only the
arithmetic is shared, so the callers cannot drift apart. It sits in the lowest
layer because ``processing`` and ``reconcile`` both use it and neither may import
the other.
"""

from __future__ import annotations

import random

# Past 2^64 every realistic base is above every realistic cap; bounding the exponent
# here keeps a count of failures that grows for hours (a database down overnight) from
# overflowing the float: 2.0**1024 raises OverflowError and would end the caller's loop.
MAX_EXPONENT = 64


def capped(base_s: float, exponent: int, cap_s: float) -> float:
    """``min(cap, base · 2^exponent)``, for any exponent however many failures it counts."""
    return min(cap_s, base_s * 2.0 ** min(exponent, MAX_EXPONENT))


def full_jitter(rng: random.Random, base_s: float, exponent: int, cap_s: float) -> float:
    """``uniform(0, capped(base, exponent, cap))``: one draw from ``rng``."""
    return rng.uniform(0, capped(base_s, exponent, cap_s))
