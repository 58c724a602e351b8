"""Bulk operations (``hookd.ops.operations``) on SQLite and PostgreSQL: an estimate
before, progress during, the end; cancel within a second; one operation per request
id; the cancel action; a destination's replay; one runner at a time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import BadRequest, Conflict
from hookd.ops import EventOps, OperationFilter, OperationOps, OperationRequest
from hookd.sources import Sources, parse_sources
from store.claims import claiming
from store.crypto import BodyCipher
from store.intake.events import insert_events
from store.models import EVENTS, HANDLER_RUNS, OPERATIONS
from store.status import OperationAction
from tests.support.constants import SOURCES_TOML
from tests.support.data import new_event

pytestmark = pytest.mark.anyio

EVENTS_IN_RANGE = 2_000
OUTSIDE = 100  # before the range and after it, each


async def seed(
    engine: AsyncEngine,
    count: int,
    *,
    received_at: datetime,
    status: str = "processed",
    source: str = "github",
    prefix: str = "k",
) -> list[str]:
    """``count`` events received one millisecond apart from ``received_at``."""
    async with engine.begin() as conn:
        stored = await insert_events(
            conn, [new_event(f"{prefix}-{i}", source) for i in range(count)], BodyCipher("")
        )
        ids = [s.event_id for s in stored]
        await conn.execute(
            sa.update(EVENTS)
            .where(EVENTS.c.id == sa.bindparam("event_id"))
            .values(
                received_at=sa.bindparam("at"),
                status=status,
                attempts=1 if status != "pending" else 0,
            ),
            [
                {"event_id": event_id, "at": received_at + timedelta(milliseconds=i)}
                for i, event_id in enumerate(ids)
            ],
        )
    return ids


async def statuses(engine: AsyncEngine, ids: list[str]) -> dict[str, int]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(EVENTS.c.status, sa.func.count())
            .where(EVENTS.c.id.in_(ids))
            .group_by(EVENTS.c.status)
        )
        return {str(status): int(n) for status, n in rows}


def operations_for(
    engine: AsyncEngine,
    wake: Callable[[], Awaitable[None]],
    *,
    batch: int = 100,
    sources: Sources | None = None,
) -> OperationOps:
    sources = sources or Sources(Path("none.toml"), {})
    return OperationOps(engine, sources, EventOps(engine, wake), batch=batch, lease_s=30)


def replay_of(flt: dict[str, object], request_id: str | None = None) -> OperationRequest:
    return OperationRequest(OperationAction.REPLAY, OperationFilter.parse(flt), request_id)


async def nothing() -> None:
    pass


async def test_bulk_replay_of_a_time_range_shows_an_estimate_progress_and_completes(
    engine: AsyncEngine,
) -> None:
    start = datetime.now(UTC) - timedelta(hours=1)
    end = start + timedelta(minutes=30)
    before = await seed(engine, OUTSIDE, received_at=start - timedelta(minutes=5), prefix="b")
    inside = await seed(engine, EVENTS_IN_RANGE, received_at=start, prefix="in")
    after = await seed(engine, OUTSIDE, received_at=end, prefix="a")  # until is exclusive
    seen: list[dict[str, int]] = []
    ops: OperationOps

    async def wake() -> None:  # after each batch commits: the progress as a client sees it
        seen.append((await ops.get(operation_id)).answer()["progress"])

    ops = operations_for(engine, wake, batch=250)
    asked = await ops.create(
        replay_of({"since": start.isoformat(), "until": end.isoformat()}), trigger="api"
    )
    operation_id = asked.operation.id
    assert asked.created
    assert asked.operation.answer()["status"] == "queued" and not asked.operation.answer()["done"]
    assert asked.operation.answer()["progress"] == {
        "total": EVENTS_IN_RANGE,
        "done": 0,
        "changed": 0,
        "skipped": 0,
    }
    assert await statuses(engine, inside) == {"processed": EVENTS_IN_RANGE}, "asking changes none"

    assert await ops.run(operation_id)

    done = [p["done"] for p in seen]
    assert done == list(range(250, EVENTS_IN_RANGE + 1, 250)), "progress after every batch"
    assert all(p["total"] == EVENTS_IN_RANGE for p in seen)
    final = (await ops.get(operation_id)).answer()
    assert (final["status"], final["done"], final["error"]) == ("succeeded", True, None)
    assert final["progress"] == {
        "total": EVENTS_IN_RANGE,
        "done": EVENTS_IN_RANGE,
        "changed": EVENTS_IN_RANGE,
        "skipped": 0,
    }
    assert final["finished_at"] is not None and final["poll_after_seconds"] is None
    assert await statuses(engine, inside) == {"pending": EVENTS_IN_RANGE}
    assert await statuses(engine, before + after) == {"processed": 2 * OUTSIDE}


async def test_a_cancelled_operation_stops_within_a_second_and_reports_how_far_it_got(
    engine: AsyncEngine,
) -> None:
    ids = await seed(engine, EVENTS_IN_RANGE, received_at=datetime.now(UTC) - timedelta(hours=1))

    async def slow_wake() -> None:  # a wake-up that takes its time (a slow Redis)
        await asyncio.sleep(0.02)

    ops = operations_for(engine, slow_wake, batch=20)
    asked = await ops.create(replay_of({"source": "github"}), trigger="api")
    operation_id = asked.operation.id
    runner = asyncio.create_task(ops.run(operation_id))
    while (await ops.get(operation_id)).progress.done < 200:
        assert not runner.done(), "the operation ended before it could be cancelled"
        await asyncio.sleep(0.01)

    asked_at = time.monotonic()
    cancelled = (await ops.cancel(operation_id)).answer()
    took_s = time.monotonic() - asked_at
    assert await runner

    assert cancelled["done"] and cancelled["status"] == "cancelled"
    assert took_s < 1.0, f"stopped {took_s:.2f}s after the cancel"
    progress = cancelled["progress"]
    assert 200 <= progress["done"] < EVENTS_IN_RANGE
    assert progress["changed"] == progress["done"]
    assert cancelled["error"] == {
        "code": "cancelled",
        "message": f"cancelled after {progress['done']} of {EVENTS_IN_RANGE} events gone "
        f"over, {progress['changed']} changed",
    }
    counts = await statuses(engine, ids)
    assert counts == {"pending": progress["done"], "processed": EVENTS_IN_RANGE - progress["done"]}
    await asyncio.sleep(0.3)
    assert await statuses(engine, ids) == counts, "nothing changed after it stopped"
    assert await ops.cancel(operation_id) == await ops.get(operation_id), "cancel again: same"


async def test_the_same_request_id_twice_runs_one_operation(engine: AsyncEngine) -> None:
    ids = await seed(engine, 50, received_at=datetime.now(UTC) - timedelta(hours=1))
    wakes: list[int] = []

    async def wake() -> None:
        wakes.append(1)

    ops = operations_for(engine, wake)
    request = replay_of({"source": "github"}, request_id="retry-me")
    first, second = await asyncio.gather(
        ops.create(request, trigger="api"), ops.create(request, trigger="api")
    )
    assert sorted([first.created, second.created]) == [False, True]
    assert first.operation.id == second.operation.id
    runners = await asyncio.gather(*(ops.run(first.operation.id) for _ in range(2)))
    assert sorted(runners) == [False, True], "one runner at a time"
    again = await ops.create(request, trigger="api")
    assert (again.created, again.operation.id) == (False, first.operation.id)
    assert again.operation.answer()["progress"]["changed"] == 50
    assert len(wakes) == 1, "one batch, replayed once"
    async with engine.connect() as conn:
        assert await conn.scalar(sa.select(sa.func.count()).select_from(OPERATIONS)) == 1
    assert await statuses(engine, ids) == {"pending": 50}
    with pytest.raises(Conflict) as refused:
        await ops.create(replay_of({"source": "stripe"}, "retry-me"), trigger="api")
    assert refused.value.reason == "request_id_reused"


async def test_a_dry_run_counts_and_changes_nothing(engine: AsyncEngine) -> None:
    ids = await seed(engine, 30, received_at=datetime.now(UTC) - timedelta(hours=1))
    ops = operations_for(engine, nothing)
    request = OperationRequest(
        OperationAction.REPLAY, OperationFilter.parse({"type": "pu*"}), dry_run=True
    )
    asked = await ops.create(request, trigger="cli")
    assert asked.operation.answer()["done"] and asked.operation.answer()["status"] == "succeeded"
    assert asked.operation.answer()["progress"]["total"] == 30
    assert asked.operation.answer()["progress"]["done"] == 0
    assert not await ops.run(asked.operation.id), "a dry run is never run"
    assert await statuses(engine, ids) == {"processed": 30}


async def test_cancel_action_makes_pending_and_retrying_events_dead_with_its_reason(
    engine: AsyncEngine,
) -> None:
    at = datetime.now(UTC) - timedelta(hours=1)
    pending = await seed(engine, 5, received_at=at, status="pending", prefix="p")
    retrying = await seed(engine, 5, received_at=at, status="retrying", prefix="r")
    processed = await seed(engine, 5, received_at=at, status="processed", prefix="d")
    busy = await seed(engine, 5, received_at=at, status="processing", prefix="b")
    ops = operations_for(engine, nothing)
    request = OperationRequest(OperationAction.CANCEL, OperationFilter.parse({"source": "github"}))
    asked = await ops.create(request, trigger="api")
    assert asked.operation.answer()["progress"]["total"] == 10, "only pending and retrying ones"
    assert await ops.run(asked.operation.id)
    final = (await ops.get(asked.operation.id)).answer()
    assert final["progress"] == {"total": 10, "done": 10, "changed": 10, "skipped": 0}
    assert await statuses(engine, pending + retrying) == {"dead": 10}
    assert await statuses(engine, processed) == {"processed": 5}
    assert await statuses(engine, busy) == {"processing": 5}
    async with engine.connect() as conn:
        errors = set(
            await conn.execute(
                sa.select(EVENTS.c.last_error, EVENTS.c.last_error_type).where(
                    EVENTS.c.id.in_(pending + retrying)
                )
            )
        )
    assert errors == {(f"cancelled by operation {final['id']}", "cancelled")}
    with pytest.raises(BadRequest) as refused:
        await ops.create(
            OperationRequest(
                OperationAction.CANCEL, OperationFilter.parse({"status": "processed"})
            ),
            trigger="api",
        )
    assert refused.value.field == "status"


async def test_a_destination_replay_runs_only_that_destination_again(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    text = f"""{SOURCES_TOML}
[[sources.destinations]]
name = "billing"
url = "http://127.0.0.1:9/hooks"
allow_insecure = true
secret = "whsec_dGVzdC1zZWNyZXQtZm9yLWJpbGxpbmctZGVzdA=="
"""
    sources = parse_sources(text, tmp_path / "hookd.toml", env={})
    assert sources.get("standard") is not None
    ids = await seed(
        engine, 4, received_at=datetime.now(UTC) - timedelta(hours=1), source="standard"
    )
    async with engine.begin() as conn:
        now = datetime.now(UTC)
        await claiming.record_handlers(
            conn, [(i, h) for i in ids for h in ("myapp:on_event", "billing")], now
        )
    ops = operations_for(engine, nothing, sources=sources)
    asked = await ops.create(replay_of({"destination": "standard/billing"}), trigger="api")
    assert asked.operation.answer()["progress"]["total"] == 4
    assert await ops.run(asked.operation.id)
    async with engine.connect() as conn:
        ledger = set(await conn.execute(sa.select(HANDLER_RUNS.c.event_id, HANDLER_RUNS.c.handler)))
    assert ledger == {(i, "myapp:on_event") for i in ids}, "only billing runs again"
    assert await statuses(engine, ids) == {"pending": 4}
    with pytest.raises(BadRequest) as refused:
        await ops.create(replay_of({"destination": "github/billing"}), trigger="api")
    assert "has no destination of that name" in refused.value.detail


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "filter"),
        ({"colour": "red"}, "filter"),
        ({"status": "lost"}, "status"),
        ({"origin": "mail"}, "origin"),
        ({"since": "yesterday"}, "since"),
        ({"since": 1e300}, "since"),
        ({"since": "2027-01-02T00:00:00Z", "until": "2027-01-01T00:00:00Z"}, "until"),
        ({"source": "a\x00b"}, "source"),
        ({"type": "\ud800"}, "type"),
        ({"source": 5}, "source"),
    ],
)
def test_a_bad_filter_is_refused_in_one_sentence(body: dict[str, object], field: str) -> None:
    with pytest.raises(BadRequest) as refused:
        OperationFilter.parse(body)
    assert refused.value.field == field
    assert refused.value.detail and "\n" not in refused.value.detail


async def test_a_runner_that_died_is_taken_over_where_it_stopped(engine: AsyncEngine) -> None:
    """Its lease runs out; the next runner starts after the last batch that committed."""
    ids = await seed(engine, 300, received_at=datetime.now(UTC) - timedelta(hours=1))
    dead = operations_for(engine, nothing, batch=100)
    asked = await dead.create(replay_of({"source": "github"}), trigger="api")
    operation_id = asked.operation.id
    async with engine.begin() as conn:  # the dead runner did one batch, then stopped
        await conn.execute(
            sa.update(OPERATIONS)
            .where(OPERATIONS.c.id == operation_id)
            .values(
                status="running",
                lease_owner="dead-runner",
                lease_expires_at=datetime.now(UTC) + timedelta(seconds=30),
                cursor=sorted(ids)[99],
                done_count=100,
                changed_count=100,
            )
        )
    other = operations_for(engine, nothing, batch=100)
    assert await other.waiting() == [], "its lease still holds"
    assert not await other.run(operation_id)
    async with engine.begin() as conn:
        await conn.execute(
            sa.update(OPERATIONS)
            .where(OPERATIONS.c.id == operation_id)
            .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    assert await other.waiting() == [operation_id]
    assert await other.run(operation_id)
    final = (await other.get(operation_id)).answer()
    assert final["status"] == "succeeded"
    assert final["progress"] == {"total": 300, "done": 300, "changed": 300, "skipped": 0}
    first = set(sorted(ids)[:100])
    assert await statuses(engine, list(first)) == {"processed": 100}, "not done twice"
    assert await statuses(engine, [i for i in ids if i not in first]) == {"pending": 200}


async def test_an_object_filter_takes_only_that_objects_events(engine: AsyncEngine) -> None:
    ids = await seed(engine, 12, received_at=datetime.now(UTC) - timedelta(hours=1))
    async with engine.begin() as conn:  # as per-object ordering stores them
        for i, event_id in enumerate(ids):
            await conn.execute(
                sa.update(EVENTS)
                .where(EVENTS.c.id == event_id)
                .values(object_key=f"cus_{i % 3}", object_version=float(i))
            )
    ops = operations_for(engine, nothing)
    asked = await ops.create(replay_of({"object": "cus_1"}), trigger="api")
    assert asked.operation.answer()["progress"]["total"] == 4
    assert await ops.run(asked.operation.id)
    chosen = [e for i, e in enumerate(ids) if i % 3 == 1]
    assert await statuses(engine, chosen) == {"pending": 4}
    assert await statuses(engine, [e for e in ids if e not in chosen]) == {"processed": 8}
