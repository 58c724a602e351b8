"""PostgreSQL: ``events`` partitioned by day (``store.retention.partitions``): made ahead, a
default that never refuses an insert, rows moved out of it, past days dropped whole
once every row in them may go, and the dedupe promise kept while that happens."""

from __future__ import annotations

import asyncio
import json
import time as clock
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.util import await_only

from hookd.event import Event
from hookd.ops import policies as retention_policies
from hookd.sources import Sources, parse_sources
from processing.processor import Processor
from store import migrate
from store.admin import stats
from store.claims import claiming
from store.ids import new_id
from store.intake.events import NewEvent, get_event, get_tombstone, insert_events
from store.models import EVENTS
from store.retention import partition_catalog, partition_create, partition_drop
from store.retention import prune as store_prune
from tests.support.asgi import running_app
from tests.support.cli import hookd_with_config as hookd
from tests.support.data import engine_of, scalar
from tests.support.emulators import StripeEmulator
from tests.support.partitions import (
    PLAIN,
    day_name,
    exists,
    homes,
    index_layout,
    key_statuses,
    names,
    noon,
    parent_indexes,
    plain_tx,
    prune_as_of,
    store_at,
)
from tests.support.stripe_source import STRIPE_KEY, deliver, stripe_source
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]
DAY = timedelta(days=1)


async def test_a_partition_per_day_from_yesterday_to_a_week_ahead_and_a_default(
    pg_url: str,
) -> None:
    now = datetime.now(UTC)

    def wanted(at: datetime) -> list[str]:
        return [partition_catalog.name_of(d) for d in partition_create.wanted_days(at)]

    # As of now, or of the database's creation when the run crossed midnight (UTC).
    made = await names(pg_url)
    default = partition_catalog.DEFAULT
    assert made in ([*wanted(now), default], [*wanted(now - timedelta(hours=1)), default])
    async with engine_of(pg_url) as engine, engine.connect() as conn:
        for part in await partition_catalog.list_partitions(conn):
            if not part.default:
                assert part.day is not None
                assert (part.lo, part.hi) == partition_catalog.bounds(part.day)
                # The bounds are the ULID prefix of the day's first millisecond.
                start = int(partition_catalog.day_start(part.day).timestamp() * 1000)
                assert part.lo == new_id(start)[:10] + "0" * 16

    # A stored event lands in today's partition; a lookup by id reads that one only.
    [event_id] = await store_at(pg_url, now, ["today"], make_partitions=False)
    assert await homes(pg_url, [event_id]) == {event_id: day_name(now)}
    async with engine_of(pg_url) as engine, engine.connect() as conn:
        plan = (
            await conn.execute(
                sa.text("EXPLAIN (FORMAT JSON) SELECT * FROM events WHERE id = :id"),
                {"id": event_id},
            )
        ).scalar()
        assert await get_event(conn, event_id) is not None
    scanned = {n["Relation Name"] for n in walk(plan[0]["Plan"]) if "Relation Name" in n}
    assert scanned == {day_name(now)}

    # The metrics' table sizes add up the partitions (events itself holds nothing).
    async with engine_of(pg_url) as engine, engine.connect() as conn:
        sizes = {t.table: t for t in await stats.table_sizes(conn)}
        leaves = (
            await conn.execute(
                sa.text(
                    "SELECT sum(pg_total_relation_size(relid)) "
                    "FROM pg_partition_tree('events') WHERE isleaf"
                )
            )
        ).scalar()
    assert sizes["events"].bytes == float(leaves) > 0
    assert sizes["handler_runs"].bytes is not None and sizes["handler_runs"].bytes > 0

    # Made ahead again: nothing to do. Three weeks on, the days a week past then.
    async with engine_of(pg_url) as engine:
        assert (await partition_create.ensure(engine)).created == []
        later = await partition_create.ensure(engine, now + 21 * DAY)
        assert later.created == [
            partition_catalog.name_of(d)
            for d in partition_create.wanted_days(now + 21 * DAY)
            if d > (now + 7 * DAY).date()
        ]
        assert (await partition_create.ensure(engine, now + 21 * DAY)).created == []
    # Created apart and attached, each carries the indexes of events and the settings.
    layout = await index_layout(pg_url)
    assert set(layout) == set(await names(pg_url))
    wanted = (await parent_indexes(pg_url), sorted(partition_catalog.STORAGE))
    assert wanted[0] >= 6
    assert all(v == wanted for v in layout.values()), layout


async def test_serve_and_db_upgrade_make_a_missing_partition(pg_url: str) -> None:
    """Whatever HOOKD_PRUNE_EVERY_S says (here: never), a receiver that starts makes
    the days ahead that are missing; so does ``hookd db upgrade``."""
    ahead = partition_catalog.name_of(datetime.now(UTC).date() + 5 * DAY)
    async with engine_of(pg_url) as engine, engine.begin() as conn:
        await conn.exec_driver_sql(f"ALTER TABLE events DETACH PARTITION {ahead}")
        await conn.exec_driver_sql(f"DROP TABLE {ahead}")
    assert not await exists(pg_url, ahead)
    sources = parse_sources(stripe_source(handler=False), Path("hookd.toml"), env={})
    async with running_app(sources, pg_url, prune_every_s=0):
        assert ahead in await names(pg_url)
    # And `hookd db upgrade`, on a database already at the head revision.
    async with engine_of(pg_url) as engine, engine.begin() as conn:
        await conn.exec_driver_sql(f"ALTER TABLE events DETACH PARTITION {ahead}")
        await conn.exec_driver_sql(f"DROP TABLE {ahead}")
    await asyncio.to_thread(migrate.upgrade, pg_url)
    assert ahead in await names(pg_url)


async def test_the_schedule_keeps_partitions_ahead_and_statistics_fresh(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every round of the maintenance schedule (a minute; here a tenth of a second)
    makes a day ahead that went missing and analyzes a table that changed a lot."""
    from hookd.runtime import prune as schedule

    monkeypatch.setattr(schedule, "LOOK_S", 0.1)
    ahead = partition_catalog.name_of(datetime.now(UTC).date() + 6 * DAY)
    sources = parse_sources(stripe_source(handler=False), Path("hookd.toml"), env={})
    async with running_app(sources, pg_url, prune_every_s=0):
        async with engine_of(pg_url) as engine, engine.begin() as conn:
            await conn.exec_driver_sql(f"ALTER TABLE events DETACH PARTITION {ahead}")
            await conn.exec_driver_sql(f"DROP TABLE {ahead}")
            lo = partition_catalog.bounds(datetime.now(UTC).date())[0][:10]
            await conn.execute(
                sa.text(
                    "INSERT INTO events (id, source, provider, dedupe_key, origin, received_at, "
                    "verified_with, headers, body_encrypted, status, attempts, "
                    "next_attempt_at, created_at, updated_at) "
                    "SELECT :lo || lpad(g::text, 16, '0'), 'stripe', 'stripe', 'k' || g, "
                    "'webhook', now(), 'v', '{}', false, 'processed', 1, now(), now(), now() "
                    "FROM generate_series(1, 12000) AS g"
                ),
                {"lo": lo},
            )
            await conn.exec_driver_sql("INSERT INTO handler_runs SELECT id, 'h', now() FROM events")
            await conn.exec_driver_sql("SELECT pg_stat_force_next_flush()")

        async def maintained() -> bool:
            analyzed = await scalar(
                pg_url,
                "SELECT count(*) FROM pg_stat_user_tables "
                "WHERE relname = 'handler_runs' AND last_analyze IS NOT NULL",
            )
            return ahead in await names(pg_url) and analyzed == 1

        await wait_for(maintained, timeout_s=30, interval_s=0.1)


def walk(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for p in plan.get("Plans", []) for n in walk(p))]


async def test_events_left_in_the_default_partition_move_into_their_day_when_it_is_made(
    pg_url: str,
) -> None:
    """A month ahead there is no partition yet: the insert goes to the default, and
    the rows move, ledger and all, once the day is made."""
    ahead = datetime.now(UTC) + 30 * DAY
    ids = await store_at(pg_url, ahead, ["late-1", "late-2"], make_partitions=False)
    assert set((await homes(pg_url, ids)).values()) == {partition_catalog.DEFAULT}
    assert await scalar(pg_url, "SELECT count(*) FROM handler_runs") == 4
    async with engine_of(pg_url) as engine:
        made = await partition_create.ensure(engine, ahead)
    assert day_name(ahead) in made.created
    assert made.moved == 2
    assert set((await homes(pg_url, ids)).values()) == {day_name(ahead)}
    assert await scalar(pg_url, "SELECT count(*) FROM events_default") == 0
    assert await scalar(pg_url, "SELECT count(*) FROM handler_runs") == 4
    assert await scalar(pg_url, "SELECT count(*) FROM event_keys") == 2


async def test_a_past_day_goes_whole_once_every_row_in_it_is_past_its_retention(
    pg_url: str, sources: Sources
) -> None:
    """Default retention: processed 30 days, dead 90. A day holding only processed
    rows goes whole at 30 days; a day with dead ones, unfinished ones or rows of a
    source without a policy stays, and row-level prune takes what may go from it."""
    d40, d41, d42, d43, d44 = (noon(n) for n in (40, 41, 42, 43, 44))
    whole = await store_at(pg_url, d40, [f"whole-{i}" for i in range(5)])
    mixed = await store_at(pg_url, d41, [f"mixed-{i}" for i in range(3)])
    dead = await store_at(pg_url, d41, ["dead-0", "dead-1"], status="dead")
    await store_at(pg_url, d42, ["open-0", "open-1"])
    pending = await store_at(pg_url, d42, ["open-2"], status="pending")
    await store_at(pg_url, d43, ["retired-0"], source="retired")
    stripe = await store_at(pg_url, d44, ["s-0", "s-1"], source="stripe")
    now = datetime.now(UTC)
    populated = {day_name(d) for d in (d40, d41, d42, d43, d44)}

    # A dry run names what would go and changes nothing.
    dry = await prune_as_of(pg_url, sources, now, only="github", dry_run=True)
    assert day_name(d40) in dry.partitions_dropped
    assert not {day_name(d) for d in (d41, d42, d43, d44)} & set(dry.partitions_dropped)
    assert await exists(pg_url, day_name(d40))

    done = await prune_as_of(pg_url, sources, now, only="github")
    assert day_name(d40) in done.partitions_dropped
    kept = done.partitions_kept
    assert kept[day_name(d41)] == "holds dead events of source 'github' still kept"
    assert kept[day_name(d42)] == "holds pending events"
    assert kept[day_name(d43)] == (
        "holds events of source 'retired', which has no retention policy here"
    )
    assert kept[day_name(d44)] == (
        "holds events of source 'stripe', which has no retention policy here"
    )
    # Of the days that held rows only d40 went; empty past days go too, never today's
    # or yesterday's (ingest may still write there).
    assert set(done.partitions_dropped) & populated == {day_name(d40)}
    assert not {day_name(now), day_name(now - DAY)} & set(done.partitions_dropped)
    assert day_name(noon(45)) in done.partitions_dropped  # made by ensure, empty
    assert not await exists(pg_url, day_name(d40))
    assert not await exists(pg_url, day_name(d40) + partition_catalog.DROPPING)
    # 5 whole, 3 + 2 processed row by row out of the days that stay.
    assert done.counts["github"].event == 10
    assert set(await homes(pg_url, [*dead, *pending, *stripe])) == {*dead, *pending, *stripe}
    assert await homes(pg_url, [*whole, *mixed]) == {}
    async with engine_of(pg_url) as engine, engine.connect() as conn:
        for event_id in whole:
            tomb = await get_tombstone(conn, event_id)
            assert tomb is not None and tomb.final_status == "processed"
            assert tomb.pruned_at == now
        assert (
            await scalar_in(
                conn, "SELECT count(*) FROM handler_runs WHERE event_id = ANY(:i)", whole
            )
            == 0
        )
        # Redelivered: a duplicate of the original.
        async with engine.begin() as tx:
            again = await insert_events(tx, [new_github("whole-0")], PLAIN)
        assert (again[0].event_id, again[0].created) == (whole[0], False)
        assert await stats.partitions_dropped(conn) == len(done.partitions_dropped)

    # Every source's policy: stripe's day goes too.
    everyone = await prune_as_of(pg_url, sources, now)
    assert day_name(d44) in everyone.partitions_dropped
    assert everyone.counts["stripe"].event == 2
    # Two months on, the dead are past 90 days: their day goes, its keys say "dead".
    later = await prune_as_of(pg_url, sources, now + 60 * DAY)
    assert day_name(d41) in later.partitions_dropped
    assert day_name(d42) in later.partitions_kept  # still pending
    assert later.counts["github"].event == 2
    keys = await key_statuses(pg_url)
    assert {keys[i] for i in dead} == {"dead"}
    assert {keys[i] for i in mixed} == {"processed"}
    assert keys[pending[0]] is None
    async with engine_of(pg_url) as engine, engine.connect() as conn:
        assert await stats.partitions_dropped(conn) == len(
            done.partitions_dropped + everyone.partitions_dropped + later.partitions_dropped
        )
        totals = await stats.pruned_totals(conn)
    assert totals[("github", "event")] == 12
    assert not any(source == "" for source, _ in totals)


def new_github(key: str) -> NewEvent:
    return NewEvent(
        "github", "github", key, "push", "webhook", datetime.now(UTC), None, "v", {}, b"{}"
    )


async def scalar_in(conn: AsyncConnection, sql: str, ids: list[str]) -> int:
    return int((await conn.execute(sa.text(sql), {"i": ids})).scalar() or 0)


async def test_a_stopped_drop_is_finished_and_a_replay_during_one_keeps_the_day(
    pg_url: str, sources: Sources
) -> None:
    d40, d41 = noon(40), noon(41)
    replayed = await store_at(pg_url, d40, [f"r-{i}" for i in range(4)])
    stopped = await store_at(pg_url, d41, [f"s-{i}" for i in range(3)])
    now = datetime.now(UTC)
    async with engine_of(pg_url) as engine:
        dropper = partition_drop.Dropper(
            engine, now=now, tx=lambda: plain_tx(engine), stopping=lambda: False, batch=2
        )
        async with engine.connect() as conn:
            parts = {p.name: p for p in await partition_catalog.list_partitions(conn)}

        # Stopped after its detach: the rows are out of events, their keys tombstones.
        assert await dropper.mark(day_name(d41))
        leftover = await dropper.detach(parts[day_name(d41)])
        assert leftover == day_name(d41) + partition_catalog.DROPPING
        assert await homes(pg_url, stopped) == {}
        async with engine.connect() as conn:
            tomb = await get_tombstone(conn, stopped[0])
        assert tomb is not None and tomb.final_status == "processed"

        # Replayed between the marking of its keys and the detach: the day stays.
        assert await dropper.mark(day_name(d40))
        async with engine.begin() as conn:
            assert await claiming.replay(conn, [replayed[0]], now) == [replayed[0]]
        assert await dropper.detach(parts[day_name(d40)]) is None
        assert await homes(pg_url, replayed) == dict.fromkeys(replayed, day_name(d40))

    # The next prune finishes the stopped drop; d40 stays for its pending event, and
    # its three processed rows go row by row.
    done = await prune_as_of(pg_url, sources, now)
    assert day_name(d41) in done.partitions_dropped
    assert done.partitions_kept[day_name(d40)] == "holds pending events"
    assert done.counts["github"].event == 6
    assert not await exists(pg_url, leftover)

    # Far on, keys expire (keep_keys_days = 400), never the one whose row is still
    # there: marked by the drop given up, it is unmarked instead.
    later = await prune_as_of(pg_url, sources, now + 500 * DAY)
    assert later.counts["github"].key == 6
    assert await key_statuses(pg_url) == {replayed[0]: None}
    assert await scalar(pg_url, "SELECT count(*) FROM event_keys WHERE pruned_at IS NULL") == 1

    # Processed again, its day goes whole at the next prune, its key marked again.
    async with engine_of(pg_url) as engine, engine.begin() as conn:
        await conn.execute(
            sa.update(EVENTS).where(EVENTS.c.id == replayed[0]).values(status="processed")
        )
    last = await prune_as_of(pg_url, sources, now)
    assert day_name(d40) in last.partitions_dropped
    assert last.counts["github"].event == 1
    assert await key_statuses(pg_url) == {replayed[0]: "processed"}


async def test_hookd_prune_says_which_partitions_it_dropped(
    pg_url: str, sources_file: Path
) -> None:
    d40 = noon(40)
    await store_at(pg_url, d40, ["a", "b"])
    await store_at(pg_url, noon(41), ["c"], status="dead")
    dry = hookd(pg_url, sources_file, "prune", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    last = json.loads(dry.stdout.splitlines()[-1])
    assert day_name(d40) in last["partitions_dropped"]
    assert last["partitions_kept"][day_name(noon(41))].startswith("holds dead events")
    assert last["dry_run"] is True
    done = hookd(pg_url, sources_file, "prune")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["github", "0", "2", "0", "0", "0"]
    said = next(line for line in lines if line.startswith("partitions dropped: "))
    assert day_name(d40) in said
    assert "1 past ones kept: they hold events still kept" in said
    assert lines[-1].endswith(": removed")
    assert not await exists(pg_url, day_name(d40))


# -- the dedupe promise while partitions come and go ---------------------------------


async def test_concurrent_redeliveries_while_partitions_are_made_and_dropped(
    pg_url: str,
) -> None:
    """Eight senders deliver, over and over, three sets of Stripe events: old ones
    (stored 40 days ago, in a day partition that a prune drops meanwhile), live ones
    (stored today) and new ones (first delivered during the race); meanwhile
    partitions are made ahead (attached) and past ones dropped (detached). Every
    answer is a 2xx carrying the key's one id, no key has two rows, and no row of a
    partition that stays is lost."""
    sources = parse_sources(stripe_source(handler=False), Path("hookd.toml"), env={})
    emulator = StripeEmulator(STRIPE_KEY)
    start = clock.time() - 600
    old_ids = emulator.add_events(40, start=start, step_s=1.0)
    live_ids = emulator.add_events(40, start=start + 100, step_s=1.0)
    new_ids = emulator.add_events(40, start=start + 200, step_s=1.0)
    d40 = noon(40)
    original = dict(
        zip(old_ids, await store_at(pg_url, d40, old_ids, source="stripe"), strict=True)
    )
    async with running_app(sources, pg_url, sweep_s=0.05, prune_every_s=0) as (_, client):
        for event_id in live_ids:
            answer = await deliver(client, emulator.event(event_id))
            assert answer.status_code == 202, answer.text
            original[event_id] = answer.json()["event_id"]

        async def processed() -> bool:
            n = await scalar(pg_url, "SELECT count(*) FROM events WHERE status = 'processed'")
            return n == len(old_ids) + len(live_ids)

        await wait_for(processed, timeout_s=60, interval_s=0.1)
        live_rows = await homes(pg_url, [original[i] for i in live_ids])
        assert len(live_rows) == len(live_ids)

        answers: list[tuple[str, httpx.Response]] = []
        senders_done = asyncio.Event()

        async def send(order: int) -> None:
            """Rounds over every key until a whole round ran after the old day went."""
            keys = old_ids + live_ids + new_ids
            keys = keys[order:] + keys[:order]
            after_drop = False
            while not after_drop:
                after_drop = bool(answered_at_drop)
                for key in keys:
                    answers.append((key, await deliver(client, emulator.event(key))))

        dropped: list[str] = []
        made: list[str] = []
        answered_at_drop: list[int] = []

        async def maintain() -> None:
            async with engine_of(pg_url) as engine:
                policy = retention_policies(sources)
                ahead = 8
                while not senders_done.is_set():
                    made.extend(
                        (
                            await partition_create.ensure(engine, datetime.now(UTC) + ahead * DAY)
                        ).created
                    )
                    ahead += 1
                    done = await store_prune.prune(
                        engine, policy, now=datetime.now(UTC), owner="racer", batch=7
                    )
                    dropped.extend(done.partitions_dropped)
                    if day_name(d40) in done.partitions_dropped:
                        answered_at_drop.append(len(answers))
                    await asyncio.sleep(0)

        async def senders() -> None:
            try:
                await asyncio.gather(*(send(i * 15) for i in range(8)))
            finally:
                senders_done.set()

        await asyncio.wait_for(asyncio.gather(senders(), maintain()), timeout=300)
    assert day_name(d40) in dropped
    assert made, "no partition was made during the race"
    # The old day went while the senders were at it: answers before, and rounds after.
    assert 0 < answered_at_drop[0] <= len(answers) - 8 * 120, (answered_at_drop, len(answers))

    assert len(answers) % 120 == 0
    by_key: dict[str, set[str]] = {}
    for key, answer in answers:
        assert answer.status_code in (200, 202), answer.text
        by_key.setdefault(key, set()).add(answer.json()["event_id"])
    assert all(len(ids) == 1 for ids in by_key.values()), by_key
    for key in old_ids + live_ids:
        assert by_key[key] == {original[key]}
    created = [a for k, a in answers if a.status_code == 202]
    assert sorted(json.loads(a.request.content)["id"] for a in created) == sorted(new_ids)

    assert await scalar(pg_url, "SELECT count(*) FROM event_keys") == 120
    assert await scalar(pg_url, "SELECT count(DISTINCT event_id) FROM event_keys") == 120
    assert (
        await scalar(
            pg_url,
            "SELECT count(*) FROM (SELECT source, dedupe_key FROM events "
            "GROUP BY 1, 2 HAVING count(*) > 1) AS twice",
        )
        == 0
    )
    # The old day is gone, every live row where it was, every new one stored once.
    assert await homes(pg_url, [original[i] for i in old_ids]) == {}
    assert await homes(pg_url, [original[i] for i in live_ids]) == live_rows
    new_rows = await homes(pg_url, [next(iter(by_key[k])) for k in new_ids])
    assert len(new_rows) == len(new_ids)
    assert await scalar(pg_url, "SELECT count(*) FROM events") == len(live_ids) + len(new_ids)


# -- a processor's exchange while a partition is attached --------------------------


async def test_an_exchange_never_deadlocks_with_a_partition_being_attached(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition is attached (``ensure``) while a processor's exchange, one that
    writes a window's outcomes and claims, has run its first statement: the ATTACH
    waits for the exchange, or the exchange for it, and neither is ever a deadlock's
    victim. The ATTACH holds the default partition and then wants the tables that
    refer to events (SHARE ROW EXCLUSIVE): an exchange that wrote the ledger first and
    then claimed (every partition, the default one too) closed a cycle with it."""
    sources = parse_sources(
        '[[sources]]\nname = "race"\nprovider = "standard"\n'
        'secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]\n',
        Path("hookd.toml"),
        env={},
    )
    ran: list[str] = []

    async def handler(event: Event) -> None:
        ran.append(event.id)

    now = datetime.now(UTC)
    events = [
        NewEvent("race", "standard", f"k{i}", "t", "webhook", now, None, "v", {}, b"{}")
        for i in range(24)
    ]
    armed: list[bool] = []
    attaching: list[asyncio.Task[partition_create.Ensured]] = []
    real_exchange = Processor._exchange

    async def exchange(self: Processor, want: int, *, fair: bool) -> tuple[int, bool]:
        # The first exchange that has both outcomes to write and events to claim.
        if want and self._finished and not attaching and not armed:
            armed.append(True)
        return await real_exchange(self, want, fair=fair)

    monkeypatch.setattr(Processor, "_exchange", exchange)
    async with engine_of(pg_url) as engine, engine_of(pg_url) as maintainer:
        async with engine.begin() as conn:
            ids = [s.event_id for s in await insert_events(conn, events, PLAIN)]

        async def attach_meanwhile() -> None:
            """ATTACH started, and run until it waits for a lock or is done."""
            attaching.append(
                asyncio.create_task(partition_create.ensure(maintainer, now + 40 * DAY))
            )
            async with engine_of(pg_url) as watcher, watcher.connect() as conn:
                for _ in range(100):
                    if attaching[0].done():
                        return
                    waiting = await conn.execute(
                        sa.text(
                            "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                            "current_database() AND wait_event_type = 'Lock' "
                            "AND query LIKE 'ALTER TABLE events ATTACH%'"
                        )
                    )
                    if waiting.scalar():
                        return
                    await asyncio.sleep(0.05)

        def first_statement(*_: object) -> None:
            if armed:
                armed.clear()
                await_only(attach_meanwhile())

        sa.event.listen(engine.sync_engine, "after_cursor_execute", first_statement)
        proc = Processor(engine, sources, {"race": [("h", handler)]}, PLAIN, batch_size=8)
        processed = await proc.drain(max_s=60)
        assert attaching, "no exchange wrote outcomes and claimed"
        made = await asyncio.wait_for(attaching[0], timeout=30)
    assert made.created, "no partition was attached"
    assert processed == len(ids)
    assert sorted(ran) == sorted(ids)
    assert await scalar(pg_url, "SELECT count(*) FROM events WHERE status = 'processed'") == len(
        ids
    )
