"""Per-object ordering ([sources.order]) end to end (``tests.support.ordering``): shuffled
Stripe updates over real HTTP to ``hookd serve``, two ``hookd worker`` processes over
PostgreSQL, Redis stopped halfway. For every object the handler sees the versions it
runs in increasing order and never two at once; an event older than one already
processed for its object is ``superseded`` (counted by the workers) and never run; each
object's newest version is processed, and is its latest known state.

Smaller counts than the issue's 1,000 updates over 50 objects, which ``bench/ordering.py``
runs (``HOOKD_TEST_ORDERING_EVENTS`` and ``HOOKD_TEST_ORDERING_OBJECTS`` set them here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import ordering

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.redis]

EVENTS = int(os.environ.get("HOOKD_TEST_ORDERING_EVENTS", "300"))
OBJECTS = int(os.environ.get("HOOKD_TEST_ORDERING_OBJECTS", "15"))


async def test_shuffled_updates_run_in_version_order_per_object_with_two_workers_and_redis_lost(
    tmp_path: Path, pg_url: str
) -> None:
    outcome = await ordering.run(tmp_path, pg_url, EVENTS, OBJECTS)
    counts = ordering.check(outcome, EVENTS)
    assert counts["objects"] == OBJECTS
    assert counts["workers"] == 2, "one worker ran every handler"
    print(f"{EVENTS} updates over {OBJECTS} objects: {counts}, {outcome.timings}")
