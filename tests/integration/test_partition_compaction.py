"""PostgreSQL: a past day that cannot go whole only because some of its rows are kept
longer (dead ones ``keep_dead_days``, unfinished ones until they finish) is rebuilt
with those rows alone once its processed ones are past ``keep_events_days``: the
same ids, contents and referring rows, nothing lost or doubled, the dedupe kept."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from hookd.ops import policies as retention_policies
from hookd.sources import Sources
from store.claims import claiming
from store.intake.events import NewEvent, insert_events
from store.models import EVENTS
from store.retention import partition_catalog, partition_compact, partition_create, partition_drop
from store.retention import prune as store_prune
from tests.support.cli import hookd_with_config as hookd
from tests.support.data import engine_of, scalar
from tests.support.partitions import (
    PLAIN,
    exists,
    homes,
    index_layout,
    key_statuses,
    noon,
    parent_indexes,
    plain_tx,
    prune_as_of,
    store_at,
)

# A claim as a lone claimer makes it: events of github, up to 10.
GITHUB = claiming.alone(["github"], 10)

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]
DAY = timedelta(days=1)
# A table of a later migration (or an operator's) that refers to events: compaction
# finds it in the catalog and keeps the rows of the events that stay.
NOTES = (
    "CREATE TABLE event_notes (event_id varchar(26) NOT NULL REFERENCES events (id) "
    "ON DELETE CASCADE, note text NOT NULL, PRIMARY KEY (event_id, note))"
)


@pytest.fixture(autouse=True)
def small_days(monkeypatch: pytest.MonkeyPatch) -> None:
    """A few processed rows make a day worth compacting here (1,000 in production)."""
    monkeypatch.setattr(partition_compact, "COMPACT_MIN_GOING", 2)


async def store_on(url: str, moment: datetime, keys: list[str], **options: Any) -> list[str]:
    """``store_at`` with that day's partition only (no week around it to drop later)."""
    async with engine_of(url) as engine:
        await partition_create.create_day(engine, moment.date())
    return await store_at(url, moment, keys, make_partitions=False, **options)


async def execute(url: str, sql: str, **params: Any) -> None:
    async with engine_of(url) as engine, engine.begin() as conn:
        await conn.execute(sa.text(sql), params)


async def rows_of(url: str, table: str, column: str, ids: list[str]) -> dict[str, list[str]]:
    """Each id -> its rows in ``table`` (as JSON text, sorted): what must survive intact."""
    async with engine_of(url) as engine, engine.connect() as conn:
        result = await conn.execute(
            sa.text(
                f"SELECT {column}, row_to_json(t)::text FROM {table} AS t "
                f"WHERE {column} = ANY(:ids)"
            ),
            {"ids": ids},
        )
        out: dict[str, list[str]] = {}
        for key, row in result:
            out.setdefault(key, []).append(row)
        return {k: sorted(v) for k, v in out.items()}


async def relation(url: str, name: str) -> tuple[int, int]:
    """(oid, bytes with indexes) of a table."""
    async with engine_of(url) as engine, engine.connect() as conn:
        row = (
            await conn.execute(
                sa.text(
                    "SELECT oid::int, pg_total_relation_size(oid) FROM pg_class "
                    "WHERE oid = to_regclass(:n)"
                ),
                {"n": name},
            )
        ).one()
        return int(row[0]), int(row[1])


def redelivery(key: str) -> NewEvent:
    return NewEvent(
        "github", "github", key, "push", "webhook", datetime.now(UTC), None, "v", {}, b"{}"
    )


async def set_status(url: str, ids: list[str], **values: Any) -> None:
    async with engine_of(url) as engine, engine.begin() as conn:
        await conn.execute(sa.update(EVENTS).where(EVENTS.c.id.in_(ids)).values(**values))


async def test_a_day_past_keep_events_days_is_rebuilt_with_only_its_dead_and_unfinished_rows(
    pg_url: str, sources: Sources, sources_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As many processed events as make a day worth compacting for `hookd prune` too.
    monkeypatch.setattr(partition_compact, "COMPACT_MIN_GOING", 1_000)
    d40 = noon(40)
    day = partition_catalog.name_of(d40.date())
    processed = await store_on(pg_url, d40, [f"p-{i}" for i in range(1_000)])
    dead = await store_on(pg_url, d40, ["dead-0", "dead-1"], status="dead")
    waiting = await store_on(pg_url, d40, ["wait-0"], status="retrying")
    staying = dead + waiting
    everyone = processed + staying
    await execute(pg_url, NOTES)
    await execute(
        pg_url, "INSERT INTO event_notes SELECT id, n FROM events, (VALUES ('n1'), ('n2')) AS v(n)"
    )
    # A dead event's ledger: the handler that had finished before the other failed;
    # and every event's history: its attempts.
    for event_id in dead:
        await execute(
            pg_url,
            "INSERT INTO handler_runs (event_id, handler, finished_at) VALUES (:e, 'a', now())",
            e=event_id,
        )
    await execute(
        pg_url,
        "INSERT INTO event_history (event_id, kind, at, attempt) "
        "SELECT id, 'attempt', now(), n FROM events, generate_series(1, 2) AS n",
    )
    before = await rows_of(pg_url, "events", "id", staying)
    ledger = await rows_of(pg_url, "handler_runs", "event_id", staying)
    notes = await rows_of(pg_url, "event_notes", "event_id", staying)
    history = await rows_of(pg_url, "event_history", "event_id", staying)
    assert len(history) == len(staying)
    oid, _ = await relation(pg_url, day)
    now = datetime.now(UTC)

    dry = await prune_as_of(pg_url, sources, now, only="github", dry_run=True)
    assert dry.partitions_compacted == [day]
    said = hookd(pg_url, sources_file, "prune", "--dry-run", "--source", "github")
    assert said.returncode == 0, said.stderr
    assert f"1 of them would be compacted to those events ({day})" in said.stdout
    assert await homes(pg_url, processed) == dict.fromkeys(processed, day)

    done = await prune_as_of(pg_url, sources, now, only="github")
    assert done.partitions_compacted == [day]
    assert done.partitions_kept[day] == "holds retrying events"
    assert day not in done.partitions_dropped
    assert done.counts["github"].event == len(processed)
    # The day's partition is a new table, under its name and bounds, with every index.
    assert (await relation(pg_url, day))[0] != oid
    assert not await exists(pg_url, day + partition_catalog.DROPPING)
    assert not await exists(pg_url, day + partition_catalog.COMPACTING)
    assert (await index_layout(pg_url))[day] == (
        await parent_indexes(pg_url),
        sorted(partition_catalog.STORAGE),
    )
    # The rows that stay, as they were, with what refers to them; the others gone.
    assert await homes(pg_url, everyone) == dict.fromkeys(staying, day)
    assert await rows_of(pg_url, "events", "id", staying) == before
    assert await rows_of(pg_url, "handler_runs", "event_id", everyone) == ledger
    assert await rows_of(pg_url, "event_notes", "event_id", everyone) == notes
    assert await rows_of(pg_url, "event_history", "event_id", everyone) == history
    keys = await key_statuses(pg_url)
    assert {keys[i] for i in processed} == {"processed"}
    assert {keys[i] for i in staying} == {None}
    # Redelivered, old keys are duplicates of their originals, whichever way they went.
    async with engine_of(pg_url) as engine, engine.begin() as conn:
        again = await insert_events(conn, [redelivery("p-0"), redelivery("dead-1")], PLAIN)
    assert [(s.event_id, s.created) for s in again] == [(processed[0], False), (dead[1], False)]
    assert await scalar(pg_url, "SELECT count(*) FROM events") == len(staying)
    # The retrying event is claimed from the rebuilt day as before.
    async with engine_of(pg_url) as engine, engine.begin() as conn:
        claimed = await claiming.claim_due(conn, "w", 30, 10, now + DAY, shares=GITHUB)
        assert [r.id for r in claimed] == waiting
        assert await claiming.mark_processed(conn, waiting, "w", now) == set(waiting)

    # Nothing changed since: the next prune leaves the day alone, until the dead are
    # past keep_dead_days and it goes whole.
    again_done = await prune_as_of(pg_url, sources, now, only="github")
    assert again_done.partitions_compacted == []
    assert (await relation(pg_url, day))[0] != oid
    later = await prune_as_of(pg_url, sources, now + 60 * DAY, only="github")
    assert day in later.partitions_dropped
    keys = await key_statuses(pg_url)
    assert {keys[i] for i in dead} == {"dead"}
    assert keys[waiting[0]] == "processed"
    for table in ("event_notes", "handler_runs", "event_history"):
        assert await scalar(pg_url, f"SELECT count(*) FROM {table}") == 0


async def snapshot(conn: AsyncConnection, ids: list[str]) -> dict[str, str]:
    result = await conn.execute(
        sa.text("SELECT id, row_to_json(e)::text FROM events AS e WHERE id = ANY(:ids)"),
        {"ids": ids},
    )
    return {r[0]: r[1] for r in result}


async def test_rows_changed_while_a_day_is_compacted_are_carried_over_and_none_is_lost(
    pg_url: str, sources: Sources
) -> None:
    """Between the copy of the rows that stay and the swap: a processed event is
    replayed (it stays now), a pending one is processed (it goes now), a dead one is
    replayed and another gets a ledger row. The swap sees each change; every event
    is afterwards either one row or one tombstone, never both, never neither."""
    d40 = noon(40)
    day = partition_catalog.name_of(d40.date())
    processed = await store_on(pg_url, d40, [f"p-{i}" for i in range(5)])
    dead = await store_on(pg_url, d40, ["dead-0", "dead-1", "dead-2"], status="dead")
    pending = await store_on(pg_url, d40, ["new-0", "new-1"], status="pending")
    everyone = processed + dead + pending
    now = datetime.now(UTC)
    horizons = {
        s: store_prune._horizon(p, now) for s, p in retention_policies(sources, "github").items()
    }
    async with engine_of(pg_url) as engine:
        dropper = partition_compact.Compactor(
            engine, now=now, tx=lambda: plain_tx(engine), stopping=lambda: False, batch=3
        )
        async with engine.connect() as conn:
            part = next(p for p in await partition_catalog.list_partitions(conn) if p.name == day)
            assert await partition_compact.compactable(conn, part, horizons)
        started = datetime.now(UTC)
        staging = day + partition_catalog.COMPACTING
        copied = await dropper.copy_staying(part, staging, horizons)
        assert copied is not None
        assert set(copied) == {*dead, *pending}
        async with engine.begin() as conn:
            assert await claiming.replay(conn, [processed[0], dead[0]], now) == [
                processed[0],
                dead[0],
            ]
            taken = await claiming.claim_due(conn, "w", 30, 10, now, shares=GITHUB)
            assert {r.id for r in taken} == {*pending, processed[0], dead[0]}
            await claiming.release(conn, [processed[0], dead[0], pending[1]], "w", now)
            assert await claiming.mark_processed(conn, [pending[0]], "w", now) == {pending[0]}
            await claiming.record_handlers(conn, [(dead[1], "a")], now)
            stay = [processed[0], dead[0], dead[1], dead[2], pending[1]]
            expected = await snapshot(conn, stay)
        leftover = await dropper.swap(part, staging, horizons, copied)
        assert leftover == day + partition_catalog.DROPPING
        counts = await dropper.finish(leftover, started - partition_drop.CLOCK_SKEW, whole=False)
    assert counts == {"github": 5}
    assert await homes(pg_url, everyone) == dict.fromkeys(stay, day)
    async with engine_of(pg_url) as engine, engine.connect() as conn:
        assert await snapshot(conn, stay) == expected
    assert (
        await scalar(pg_url, f"SELECT count(*) FROM handler_runs WHERE event_id = '{dead[1]}'") == 1
    )
    keys = await key_statuses(pg_url)
    gone = [i for i in everyone if i not in stay]
    assert {i: keys[i] for i in gone} == dict.fromkeys(gone, "processed")
    assert {keys[i] for i in stay} == {None}
    # One row or one tombstone per event: never both, never neither.
    assert await scalar(
        pg_url,
        "SELECT count(*) FROM event_keys k WHERE (k.pruned_at IS NULL) = "
        "EXISTS (SELECT 1 FROM events e WHERE e.id = k.event_id)",
    ) == len(everyone)
    assert await scalar(pg_url, "SELECT count(*) FROM events") == len(stay)


async def test_redeliveries_racing_a_compaction_are_all_duplicates_of_the_original(
    pg_url: str, sources: Sources
) -> None:
    """While a prune compacts the day (three rows a batch, so it takes a while), a
    sender redelivers every key of it again and again: each answer is the key's
    original id, no row or key is added, and the rows that stay are all there."""
    d40 = noon(40)
    day = partition_catalog.name_of(d40.date())
    keys = [f"p-{i}" for i in range(60)]
    processed = await store_on(pg_url, d40, keys)
    dead = await store_on(pg_url, d40, ["dead-0", "dead-1"], status="dead")
    original = dict(zip([*keys, "dead-0", "dead-1"], processed + dead, strict=True))
    answers: list[tuple[str, str, bool]] = []
    finished = asyncio.Event()

    async def send() -> None:
        async with engine_of(pg_url) as engine:
            while not finished.is_set():
                async with engine.begin() as conn:
                    stored = await insert_events(conn, [redelivery(k) for k in original], PLAIN)
                answers.extend(
                    (k, s.event_id, s.created) for k, s in zip(original, stored, strict=True)
                )
                await asyncio.sleep(0)

    async def compact() -> store_prune.Pruned:
        try:
            return await prune_as_of(pg_url, sources, datetime.now(UTC), only="github", batch=3)
        finally:
            finished.set()

    _, done = await asyncio.wait_for(asyncio.gather(send(), compact()), timeout=120)
    assert done.partitions_compacted == [day]
    assert len(answers) >= 2 * len(original)
    assert all(created is False for _, _, created in answers)
    assert {(k, i) for k, i, _ in answers} == set(original.items())
    assert await scalar(pg_url, "SELECT count(*) FROM event_keys") == len(original)
    assert await homes(pg_url, list(original.values())) == dict.fromkeys(dead, day)
