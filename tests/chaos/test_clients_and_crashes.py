"""Slow and large clients, ``kill -9`` of the receiver and of the worker: each scenario
in ``chaos/`` with its ``QUICK`` counts. Every check must hold, and the figures must show
that the fault really happened (else a passing check proves nothing)."""

from __future__ import annotations

from typing import Any

import pytest

from chaos import crash_receiver, crash_worker, slow
from tests.support import services

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture(autouse=True)
def _postgres() -> None:
    services.require_pg()


def failed(figures: dict[str, Any]) -> list[str]:
    return [name for name, ok in figures["checks"].items() if not ok]


async def test_oversized_uploads_and_trickling_clients() -> None:
    figures = await slow.run(**slow.QUICK)
    # The report, whole, in the captured output a failure shows (an assertion's
    # message is cut short).
    print(slow.report(figures))
    assert not failed(figures), failed(figures)
    assert slow.report(figures)

    big = figures["oversized"]
    assert all(big["by_kind"][kind]["sent"] > 0 for kind in slow.KINDS)
    # The chunked uploads were all inside the receiver at once, just under the limit,
    # and pushed past it: memory grew by about a body each, not by what was sent.
    assert big["chunked_held_together"]
    assert big["by_kind"]["chunked"]["body_sent_median_kib"] * 1024 > figures["max_body_bytes"]
    assert big["pushed_mib"] > 2 * big["peak_growth_mib"]

    tricklers = figures["tricklers"]
    opened = tricklers["body"]["opened"] + tricklers["head"]["opened"]
    assert opened == slow.QUICK["tricklers"]
    assert tricklers["body"]["bytes_trickled_max"] >= 1
    # Cut by the deadline, not before it: they were held open that long.
    timeout_s = figures["body_timeout_s"]
    assert tricklers["body"]["cut_after_s"]["min"] >= timeout_s - 0.1
    assert tricklers["head"]["cut_after_s"]["min"] >= timeout_s - 0.1
    # Deliveries were sent all through the trickling, not after it.
    legit = figures["legit"]
    assert legit["window_s"] > timeout_s
    assert legit["sent"] >= legit["rate_per_s"] * legit["window_s"] - 1


async def test_kill_9_of_the_receiver_mid_burst() -> None:
    figures = await crash_receiver.run(**crash_receiver.QUICK)
    assert not failed(figures), (failed(figures), figures)
    assert crash_receiver.report(figures)

    cycles = figures["per_cycle"]
    assert len(cycles) == crash_receiver.QUICK["cycles"]
    # Each kill landed mid-burst: some requests acknowledged, some in flight and unanswered.
    assert all(c["acked"] > 0 and c["in_flight"] > 0 for c in cycles)
    assert all(not c["burst_over_before_kill"] for c in cycles)
    assert figures["cut_mid_request"] > 0, "no request was cut on its connection"
    assert figures["acked"] > 0
    assert figures["acked_missing"] == 0


async def test_kill_9_of_the_worker_mid_handler() -> None:
    figures = await crash_worker.run(**crash_worker.QUICK)
    assert not failed(figures), (failed(figures), figures)
    assert crash_worker.report(figures)

    cycles = figures["cycles_detail"]
    assert len(cycles) == crash_worker.QUICK["cycles"]
    # Each kill found events claimed and handlers running; they ran again after the kill.
    assert all(c["processing_at_kill"] > 0 and c["handlers_started"] > 0 for c in cycles)
    assert figures["calls"] > figures["events"], "no handler ran twice: no kill mid-handler"
    assert figures["max_attempts"] >= 2
    # Takeover waited for the lease: a claim is not stolen from a worker that may be alive.
    assert all(c["recovery_s"] >= c["lease_left_s"] for c in cycles)


async def test_workers_keep_processing_past_the_arq_jobs_of_dead_workers() -> None:
    """arq starts only jobs among the first 100 of its queue; dead workers' jobs stay there
    marked in progress for an hour. 100 of them (about 40 kills' worth) once stopped every
    worker; the worker's own backstop sweep keeps processing from the database."""
    figures = await crash_worker.run(cycles=1, ghosts=100)
    assert not failed(figures), (failed(figures), figures)
    assert figures["arq_jobs_left_in_progress"] >= 100
    assert figures["processed"] == figures["acked"] > 0
