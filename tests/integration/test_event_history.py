"""Event history on SQLite and PostgreSQL: one record per processing attempt and per
replay, written with the outcome it records (or not at all), read back oldest first by
the API, ``hookd events show`` and the admin page; origin stays how the event first
arrived; history goes with its event when prune removes it. And ``event.occurred_at``
for handlers and ``hookd try``."""

from __future__ import annotations

import asyncio
import json
import random
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.event import Event
from hookd.ops import API_REPLAY, EventOps, cli_requester
from hookd.providers.signing import sample_event
from hookd.sources import Sources, parse_sources
from processing.attempt import RetryPolicy
from processing.processor import Processor
from store.claims import history
from store.claims.history import Requester
from store.crypto import BodyCipher
from store.intake.events import NewEvent, insert_events
from store.models import EVENT_HISTORY, EVENTS
from store.retention import partition_catalog
from tests.support.cli import hookd
from tests.support.constants import SECRETS, SOURCES_TOML
from tests.support.data import engine_of, new_event, scalar
from tests.support.handlers import prepare
from tests.support.partitions import noon, prune_as_of, store_at
from tests.support.server import HookdServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio
FAST = RetryPolicy(base_s=0.01, cap_s=0.02)
ADMIN = "history-admin-token"
READ = "history-read-token"
TWO_ATTEMPTS = f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]
max_attempts = 2
"""


async def nothing_to_wake() -> None:
    return None


async def store_one(engine: AsyncEngine, key: str = "d-1") -> str:
    async with engine.begin() as conn:
        [stored] = await insert_events(conn, [new_event(key)], BodyCipher(""))
    return stored.event_id


async def drain_until(engine: AsyncEngine, proc: Processor, event_id: str, status: str) -> None:
    async def there() -> bool:
        await proc.drain()
        async with engine.connect() as conn:
            now = await conn.scalar(sa.select(EVENTS.c.status).where(EVENTS.c.id == event_id))
        return now == status

    await wait_for(there, timeout_s=10, interval_s=0.02, message=f"{event_id} never {status}")


def steps(past: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """A history as (kind, attempt number, outcome or who asked)."""
    return [
        ("attempt", e["attempt"], e["outcome"])
        if e["kind"] == "attempt"
        else ("replay", e["attempts_reset"], e["status_before"], e["via"], e["by"])
        for e in past
    ]


async def test_replay_twice_after_a_dead_end_keeps_every_attempt_and_both_replays_in_order(
    engine: AsyncEngine,
) -> None:
    sources = parse_sources(TWO_ATTEMPTS, Path("history.toml"), env={})
    broken = {"yes": True}

    async def downstream(event: Event) -> None:
        if broken["yes"]:
            raise RuntimeError("the downstream is down")

    proc = Processor(
        engine,
        sources,
        {"github": [("app.hooks:downstream", downstream)]},
        BodyCipher(""),
        retry=FAST,
        rng=random.Random(3),
    )
    ops = EventOps(engine, nothing_to_wake)
    event_id = await store_one(engine)
    await drain_until(engine, proc, event_id, "dead")
    await ops.replay_many([event_id], by=Requester("cli", "user:alice"))
    await drain_until(engine, proc, event_id, "dead")
    replayed = (await ops.replay(event_id, by=API_REPLAY)).answer()
    broken["yes"] = False
    await drain_until(engine, proc, event_id, "processed")
    detail = (await ops.show(event_id)).resource.answer()

    failed = ("attempt", 1, "retry"), ("attempt", 2, "dead")
    assert steps(detail["history"]) == [
        *failed,
        ("replay", 2, "dead", "cli", "user:alice"),
        *failed,
        ("replay", 2, "dead", "api", "token:admin"),
        ("attempt", 1, "processed"),
    ]
    # The replay's own answer ends with its marker; the event says how it first arrived.
    assert steps(replayed["history"])[-1] == ("replay", 2, "dead", "api", "token:admin")
    assert detail["origin"] == replayed["origin"] == "webhook"
    assert (detail["attempts"], detail["error"]) == (1, None)
    attempts = [e for e in detail["history"] if e["kind"] == "attempt"]
    assert {e["worker"] for e in attempts} == {proc.owner}
    for entry in attempts:
        assert entry["finished_at"] >= entry["at"]
        assert entry["duration_s"] is not None and entry["duration_s"] >= 0
    dead = [e for e in attempts if e["outcome"] != "processed"]
    assert {(e["handler"], e["error_type"]) for e in dead} == {
        ("app.hooks:downstream", "RuntimeError")
    }
    assert {e["error"] for e in dead} == {
        "app.hooks:downstream: RuntimeError: the downstream is down"
    }
    # Oldest first, and every moment in order.
    moments = [e["at"] for e in detail["history"]]
    assert moments == sorted(moments)


async def test_history_is_written_with_the_outcome_or_not_at_all(
    engine: AsyncEngine, sources: Sources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after the history rows went in, before the commit: neither the outcome
    nor the history is there; the claim's lease runs out and the takeover records both."""

    async def fine(_: Event) -> None:
        return None

    proc = Processor(engine, sources, {"github": [("fine", fine)]}, BodyCipher(""), lease_s=60)
    event_id = await store_one(engine)
    real = history.record_attempts

    async def then_crash(conn: Any, attempts: Any) -> None:
        await real(conn, attempts)
        if attempts:
            raise ConnectionResetError("the database went away before the commit")

    monkeypatch.setattr(history, "record_attempts", then_crash)
    with pytest.raises(ConnectionResetError):
        await proc.run_once()
    monkeypatch.undo()
    async with engine.begin() as conn:
        row = (await conn.execute(sa.select(EVENTS).where(EVENTS.c.id == event_id))).one()
        assert (row.status, row.attempts) == ("processing", 1)
        assert await conn.scalar(sa.select(sa.func.count()).select_from(EVENT_HISTORY)) == 0
        # The lease runs out (as if its worker had died).
        await conn.execute(
            sa.update(EVENTS).values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    await drain_until(
        engine,
        Processor(engine, sources, {"github": [("fine", fine)]}, BodyCipher("")),
        event_id,
        "processed",
    )
    past = (await EventOps(engine, nothing_to_wake).show(event_id)).resource.answer()["history"]
    assert steps(past) == [("attempt", 1, "abandoned"), ("attempt", 2, "processed")]
    assert past[0]["worker"] is None and "lease ran out" in past[0]["error"]


async def test_a_shutdown_records_the_attempt_it_cut_short_as_released(
    engine: AsyncEngine, sources: Sources
) -> None:
    started = asyncio.Event()
    calls = 0

    async def slow_once(_: Event) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            started.set()
            await asyncio.sleep(30)

    event_id = await store_one(engine)
    proc = Processor(engine, sources, {"github": [("slow", slow_once)]}, BodyCipher(""))
    task = asyncio.create_task(proc.run_once())
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await drain_until(engine, proc, event_id, "processed")
    past = (await EventOps(engine, nothing_to_wake).show(event_id)).resource.answer()["history"]
    # Given back, so the attempt after it has the same number.
    assert steps(past) == [("attempt", 1, "released"), ("attempt", 1, "processed")]
    assert past[0]["worker"] == past[1]["worker"] == proc.owner


async def test_the_api_the_cli_and_the_admin_page_show_the_history_to_the_read_token(
    sources: Sources, sqlite_url: str
) -> None:
    from tests.support.asgi import running_app

    headers, body = sample_event("github", SECRETS["github"], 1)
    async with running_app(
        sources, sqlite_url, admin_token=ADMIN, read_token=READ, sweep_s=0.05
    ) as (_, client):
        event_id = (await client.post("/hooks/github", content=body, headers=headers)).json()[
            "event_id"
        ]
        reader = {"Authorization": f"Bearer {READ}"}

        async def processed() -> dict[str, Any]:
            res = (await client.get(f"/api/events/{event_id}", headers=reader)).json()
            return res if res["status"] == "processed" else {}

        await wait_for(processed, timeout_s=10)
        refused = await client.post(f"/api/events/{event_id}/replay", headers=reader)
        assert refused.status_code == 403
        answer = await client.post(
            f"/api/events/{event_id}/replay", headers={"Authorization": f"Bearer {ADMIN}"}
        )
        assert answer.status_code == 202
        assert steps(answer.json()["history"])[-1] == (
            "replay",
            1,
            "processed",
            "api",
            "token:admin",
        )
        done = await wait_for(processed, timeout_s=10)
        assert steps(done["history"]) == [
            ("attempt", 1, "processed"),
            ("replay", 1, "processed", "api", "token:admin"),
            ("attempt", 1, "processed"),
        ]
        assert done["origin"] == "webhook"
        # Listing stays light: no history per event there.
        listed = (await client.get("/api/events", headers=reader)).json()["events"]
        assert "history" not in listed[0]

        await client.post("/admin/login", data={"token": READ})
        page = (await client.get(f"/admin/events/{event_id}")).text
        assert "<h2>History</h2>" in page
        assert page.count("Attempt 1") == 2
        assert "token:admin" in page and "was <span" in page

    replayed = hookd(sqlite_url, "replay", event_id)
    assert replayed.returncode == 0, replayed.stderr
    shown = hookd(sqlite_url, "events", "show", event_id)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    listed_history = [line.split("  ", 2)[-1] for line in lines[lines.index("history") + 1 :]]
    cli = cli_requester()
    by_cli = f"cli ({cli.by})" if cli.by else "cli"
    assert [line.split("; ")[0] for line in listed_history] == [
        "attempt 1: processed",
        "replay by api (token:admin): was processed, 1 attempt(s) reset",
        "attempt 1: processed",
        f"replay by {by_cli}: was processed, 1 attempt(s) reset",
    ]
    as_json = json.loads(hookd(sqlite_url, "events", "show", event_id, "--json").stdout)
    assert [e["via"] for e in as_json["history"] if e["kind"] == "replay"] == ["api", "cli"]
    assert as_json["origin"] == "webhook"


async def test_a_replay_from_the_admin_page_is_recorded_via_admin(
    sources: Sources, sqlite_url: str
) -> None:
    from tests.support.asgi import running_app

    headers, body = sample_event("github", SECRETS["github"], 1)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    async with running_app(sources, sqlite_url, admin_token=ADMIN, sweep_s=0.05) as (_, client):
        event_id = (await client.post("/hooks/github", content=body, headers=headers)).json()[
            "event_id"
        ]

        async def processed() -> dict[str, Any]:
            res = (await client.get(f"/api/events/{event_id}", headers=admin)).json()
            return res if res["status"] == "processed" else {}

        await wait_for(processed, timeout_s=10)
        assert (await client.post("/admin/login", data={"token": ADMIN})).status_code == 303
        found = re.search(r'name="csrf" value="([^"]+)"', (await client.get("/admin")).text)
        assert found
        answer = await client.post(
            f"/admin/events/{event_id}/replay", data={"csrf": found.group(1)}
        )
        assert answer.status_code == 303
        assert answer.headers["location"].endswith("done=replayed")
        done = await wait_for(processed, timeout_s=10)
    assert steps(done["history"]) == [
        ("attempt", 1, "processed"),
        ("replay", 1, "processed", "admin", "session:admin"),
        ("attempt", 1, "processed"),
    ]
    assert done["origin"] == "webhook"


async def test_handlers_and_hookd_try_get_the_providers_occurred_at(
    engine: AsyncEngine, sources: Sources, db_url: str
) -> None:
    occurred = datetime(2027, 1, 31, 12, 30, 15, tzinfo=UTC)
    seen: list[datetime | None] = []

    async def handler(event: Event) -> None:
        seen.append(event.occurred_at)

    events = [
        NewEvent(
            "github", "github", key, "push", "webhook", datetime.now(UTC), when, "v", {}, b"{}"
        )
        for key, when in (("with-time", occurred), ("without-time", None))
    ]
    async with engine.begin() as conn:
        ids = [s.event_id for s in await insert_events(conn, events, BodyCipher(""))]
    proc = Processor(engine, sources, {"github": [("h", handler)]}, BodyCipher(""))
    for event_id in ids:
        await drain_until(engine, proc, event_id, "processed")
    assert sorted(seen, key=lambda t: t is None) == [occurred, None]

    tried = hookd(db_url, "try", "tests.support.try_handlers:occurred", ids[0])
    assert tried.returncode == 0, tried.stderr
    assert "returned in" in tried.stdout
    assert repr(occurred.isoformat()) in tried.stdout


async def test_history_goes_with_its_event_when_prune_removes_it(
    db_url: str, sources: Sources
) -> None:
    """Processed events 40 and 41 days old go (on PostgreSQL day 40's partition whole,
    day 41's rows one by one, its dead event staying); their history goes with them."""
    whole = await store_at(db_url, noon(40), ["old-0", "old-1"])
    mixed = await store_at(db_url, noon(41), ["mixed-0"])
    dead = await store_at(db_url, noon(41), ["dead-0"], status="dead")
    kept = await store_at(db_url, noon(1), ["new-0"])
    async with engine_of(db_url) as engine:
        async with engine.begin() as conn:
            await history.record_attempts(
                conn,
                [
                    history.Attempt(event_id, n, "w", noon(40), "retry" if n == 1 else "processed")
                    for event_id in [*whole, *mixed, *dead, *kept]
                    for n in (1, 2)
                ],
            )
            await history.record_replays(conn, [(dead[0], 2, "dead")], Requester("cli"), noon(40))
        done = await prune_as_of(db_url, sources, datetime.now(UTC), only="github")
        assert done.counts["github"].event == 3
        if done.partitioned:  # day 40 went whole, its history deleted before the detach
            assert partition_catalog.name_of(noon(40).date()) in done.partitions_dropped
        async with engine.connect() as conn:
            left = await conn.execute(
                sa.select(EVENT_HISTORY.c.event_id, sa.func.count()).group_by(
                    EVENT_HISTORY.c.event_id
                )
            )
            assert dict(left.all()) == {dead[0]: 3, kept[0]: 2}


@pytest.mark.postgres
async def test_a_worker_killed_mid_attempt_leaves_no_history_and_the_takeover_records_it(
    tmp_path: Path, pg_url: str
) -> None:
    """``kill -9`` of ``hookd serve`` while a handler runs: the attempt recorded nothing
    (no half-written history); the next server takes the claim over once its lease ran
    out and records the abandoned attempt, then its own."""
    await prepare(pg_url)
    config = tmp_path / "hookd.toml"
    config.write_text(
        SOURCES_TOML.replace(
            'name = "github"\nprovider = "github"\n',
            'name = "github"\nprovider = "github"\n'
            'handlers = ["tests.support.handlers:effect_idempotent"]\n',
            1,
        )
    )
    env = {
        "HOOKD_CONFIG": str(config),
        "HOOKD_DATABASE_URL": pg_url,
        "HOOKD_LEASE_S": "4",
        "HOOKD_HANDLER_TIMEOUT_S": "3",
        "HOOKD_SWEEP_S": "0.2",
        # Long enough to be sure of killing the server while the handler runs.
        "TEST_HANDLER_SLEEP_S": "2.5",
    }
    headers, body = sample_event("github", SECRETS["github"], 7)
    with HookdServer(env, tmp_path) as first:
        async with httpx.AsyncClient() as client:
            answer = await client.post(first.url + "/hooks/github", content=body, headers=headers)
        event_id = answer.json()["event_id"]

        async def handler_running() -> bool:
            calls = f"SELECT count(*) FROM calls WHERE event_id = '{event_id}'"
            return await scalar(pg_url, calls) == 1

        await wait_for(handler_running, timeout_s=15, message=first.log)
        first.kill9()
    rows = await scalar(pg_url, f"SELECT count(*) FROM event_history WHERE event_id = '{event_id}'")
    assert rows == 0
    assert await scalar(pg_url, f"SELECT attempts FROM events WHERE id = '{event_id}'") == 1

    with HookdServer({**env, "TEST_HANDLER_SLEEP_S": "0"}, tmp_path) as second:
        done = f"SELECT count(*) FROM events WHERE id = '{event_id}' AND status = 'processed'"

        async def processed() -> bool:
            return await scalar(pg_url, done) == 1

        await wait_for(processed, timeout_s=20, message=second.log)
    async with engine_of(pg_url) as engine:
        past = (await EventOps(engine, nothing_to_wake).show(event_id)).resource.answer()["history"]
    assert steps(past) == [("attempt", 1, "abandoned"), ("attempt", 2, "processed")]
