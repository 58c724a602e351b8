"""The destination and pause families, read from the database at scrape time: every
process agrees on a breaker's state and on what is paused, so any receiver answers
with the same values (take ``max``, not ``sum``)."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily
from sqlalchemy.ext.asyncio import AsyncConnection

from hookd.sources import Sources
from processing.delivery import destination_configs
from store.delivery import destinations as state
from store.delivery.destinations import WHOLE_SOURCE
from store.status import BreakerState

# hookd_destination_breaker_state's value per state.
BREAKER_VALUES = {state_: float(i) for i, state_ in enumerate(BreakerState)}


async def families(conn: AsyncConnection, sources: Sources) -> list[GaugeMetricFamily]:
    targets = [(s.name, c.name) for s in sources for c in destination_configs(s)]
    pauses = await state.all_pauses(conn)
    breakers = await state.all_breakers(conn)
    waiting = await state.waiting(conn, targets)
    breaker = GaugeMetricFamily(
        "hookd_destination_breaker_state",
        "Each destination's circuit breaker: 0 closed, 1 half-open (a delivery probes), "
        "2 open (deliveries wait for the cool-down).",
        labels=["source", "destination"],
    )
    depth = GaugeMetricFamily(
        "hookd_destination_queue_depth",
        "Each destination's queue: its source's events not done yet that it has neither "
        "delivered nor skipped.",
        labels=["source", "destination"],
    )
    destination_paused = GaugeMetricFamily(
        "hookd_destination_paused",
        "1 while a destination is paused (its deliveries wait, using no attempt).",
        labels=["source", "destination"],
    )
    source_paused = GaugeMetricFamily(
        "hookd_source_paused",
        "1 while a source's processing is paused (its events are stored, not processed).",
        labels=["source"],
    )
    for key in targets:
        row = breakers.get(key)
        breaker.add_metric(list(key), BREAKER_VALUES[BreakerState(row.state)] if row else 0.0)
        depth.add_metric(list(key), waiting.get(key, 0))
        pause = pauses.get(key)
        destination_paused.add_metric(list(key), 1.0 if pause and pause.paused else 0.0)
    for source in sources:
        pause = pauses.get((source.name, WHOLE_SOURCE))
        source_paused.add_metric([source.name], 1.0 if pause and pause.paused else 0.0)
    return [breaker, depth, destination_paused, source_paused]
