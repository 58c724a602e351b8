"""The receiver's batched metric writes: the same series as one write per request."""

from __future__ import annotations

import asyncio
import random

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from ingest import metrics
from ingest.metrics import ACK_BUCKETS, AckTally, observe_many


def exposition(values: list[float], *, many: bool) -> bytes:
    registry = CollectorRegistry()
    histogram = Histogram("t_seconds", "t", ["source"], buckets=ACK_BUCKETS, registry=registry)
    child = histogram.labels("github")
    if many:
        observe_many(child, values)
    else:
        for value in values:
            child.observe(value)
    return b"\n".join(
        line for line in generate_latest(registry).splitlines() if b"_created" not in line
    )


def test_observe_many_matches_observe_one_by_one() -> None:
    rng = random.Random(7)
    # Every bound exactly, just above and below each, far beyond the last, and zero.
    values = list(ACK_BUCKETS) + [b * 1.0001 for b in ACK_BUCKETS]
    values += [b * 0.9999 for b in ACK_BUCKETS] + [0.0, 60.0, 1e6]
    values += [rng.expovariate(200) for _ in range(2_000)]
    assert exposition(values, many=True) == exposition(values, many=False)


def sample(name: str, **labels: str) -> float:
    from prometheus_client import REGISTRY

    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_a_turn_of_requests_is_written_once_and_before_what_follows() -> None:
    tally = AckTally()
    source = "tally-test"
    metrics.initialise([source])
    before = sample("hookd_webhooks_received_total", source=source, outcome="accepted")
    seen_after: list[float] = []

    async def scenario() -> None:
        for _ in range(50):
            tally.record(source, "accepted", 0.003)
        tally.record(source, "duplicate", 0.002)
        # Nothing written yet: the write is queued behind this turn...
        assert sample("hookd_webhooks_received_total", source=source, outcome="accepted") == before
        # ...and runs before whatever is queued after it (a scrape, say).
        asyncio.get_running_loop().call_soon(
            lambda: seen_after.append(
                sample("hookd_webhooks_received_total", source=source, outcome="accepted")
            )
        )
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert seen_after == [before + 50]
    assert sample("hookd_webhooks_received_total", source=source, outcome="duplicate") == 1
    assert sample("hookd_ack_seconds_count", source=source) == 51
