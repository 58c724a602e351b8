"""Per-object ordering ([sources.order]) end to end, for ``tests/integration/
test_ordering_workers.py`` and ``bench/ordering.py``: Stripe ``customer.updated``
events of many objects, signed and posted in shuffled order to a real ``hookd serve``,
processed by two ``hookd worker`` processes over PostgreSQL, with Redis stopped once
half of them are in (the workers' sweeps take over from the wake-ups).

``record`` is the handler (``tests.support.ordering:record``): for every run it writes
the event, its object and version, when the run started and ended (wall clock: the
processes share one machine) and the worker's pid to ``ordering_seen`` in hookd's own
database (``HOOKD_DATABASE_URL``). ``check`` says whether the runs kept the promise."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from hookd import Event
from tests.support.constants import STRIPE_SECRET
from tests.support.data import engine_of
from tests.support.server import HookdServer, HookdWorker, RedisServer
from tests.support.signing import signature_value
from tests.support.waiting import wait_for

BASE = 1_750_000_000  # the versions: Stripe's `created`, unix seconds
TOKEN = "ordering-test-token"
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ordering_seen (event_id VARCHAR(26) NOT NULL, "
    "object_key VARCHAR(255) NOT NULL, version DOUBLE PRECISION NOT NULL, "
    "started DOUBLE PRECISION NOT NULL, finished DOUBLE PRECISION NOT NULL, "
    "pid INTEGER NOT NULL)"
)

_engines: dict[int, AsyncEngine] = {}


def _engine() -> AsyncEngine:
    loop_id = id(asyncio.get_running_loop())
    if loop_id not in _engines:
        _engines[loop_id] = create_async_engine(os.environ["HOOKD_DATABASE_URL"])
    return _engines[loop_id]


async def record(event: Event) -> None:
    started = time.time()
    await asyncio.sleep(float(os.environ.get("TEST_HANDLER_SLEEP_S", "0")))
    version = float(event.json()["created"])
    finished = time.time()
    async with _engine().begin() as conn:
        await conn.execute(
            sa.text("INSERT INTO ordering_seen VALUES (:e, :k, :v, :s, :f, :p)"),
            {
                "e": event.id,
                "k": event.object_key or "",
                "v": version,
                "s": started,
                "f": finished,
                "p": os.getpid(),
            },
        )


def sources_toml(tmp_path: Path) -> Path:
    path = tmp_path / "ordering.toml"
    path.write_text(
        f"""
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{STRIPE_SECRET}"]
handlers = ["tests.support.ordering:record"]

[sources.order]
key = "data.object.id"
version = "created"
"""
    )
    return path


def updates(count: int, objects: int, seed: int) -> list[tuple[str, int, bytes]]:
    """``count`` ``customer.updated`` events, versions 1, 2, … of each of ``objects``
    customers, shuffled: (object, version, body)."""
    out = []
    for n in range(count):
        obj, version = f"cus_{n % objects:03d}", BASE + n // objects
        body = {
            "id": f"evt_{n:06d}",
            "object": "event",
            "type": "customer.updated",
            "created": version,
            "data": {"object": {"id": obj, "object": "customer"}},
        }
        out.append((obj, version, json.dumps(body).encode()))
    random.Random(seed).shuffle(out)
    return out


async def post(url: str, batch: list[tuple[str, int, bytes]]) -> dict[str, tuple[str, int]]:
    """Post each signed, 16 at a time: event id -> (object, version); all accepted."""
    stored: dict[str, tuple[str, int]] = {}
    queue = list(batch)

    async def sender(client: httpx.AsyncClient) -> None:
        while queue:
            obj, version, body = queue.pop(0)
            ts = str(int(time.time()))
            headers = {
                "stripe-signature": signature_value("stripe", STRIPE_SECRET, body, ts),
                "content-type": "application/json",
            }
            response = await client.post("/hooks/stripe", content=body, headers=headers)
            if response.status_code != 202:
                raise AssertionError(f"{response.status_code}: {response.text}")
            stored[response.json()["event_id"]] = (obj, version)

    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        await asyncio.gather(*(sender(client) for _ in range(16)))
    return stored


async def rows(url: str, sql: str) -> list[tuple[object, ...]]:
    async with engine_of(url) as engine, engine.connect() as conn:
        return [tuple(r) for r in (await conn.execute(sa.text(sql))).all()]


async def count(url: str, sql: str) -> int:
    found = await rows(url, sql)
    return int(str(found[0][0]))


def superseded_counted(text: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "hookd_events_processed_total"
        and s.labels == {"source": "stripe", "outcome": "superseded"}
    )


@dataclass
class Outcome:
    """What a run of the scenario left: the events posted, their statuses, the handler's
    runs, the objects' states, the workers' superseded counters, and timings."""

    stored: dict[str, tuple[str, int]]
    status: dict[str, str]
    seen: list[tuple[object, ...]]  # event_id, object_key, version, started, finished, pid
    state: dict[str, tuple[float, str]]  # object -> (version, last event id)
    counted_superseded: float
    timings: dict[str, float] = field(default_factory=dict)


async def run(
    tmp_path: Path,
    url: str,
    events: int,
    objects: int,
    *,
    seed: int = 42,
    handler_s: float = 0.002,
) -> Outcome:
    """The scenario (see the module's text) on the migrated PostgreSQL database ``url``;
    each handler run lasts ``handler_s``."""
    async with engine_of(url) as engine, engine.begin() as conn:
        await conn.execute(sa.text(SCHEMA))
    env = {
        "HOOKD_CONFIG": str(sources_toml(tmp_path)),
        "HOOKD_DATABASE_URL": url,
        "HOOKD_SWEEP_S": "1",
        "HOOKD_PRUNE_EVERY_S": "0",
        "TEST_HANDLER_SLEEP_S": str(handler_s),
        "HOOKD_ADMIN_TOKEN": TOKEN,
    }
    sent = updates(events, objects, seed)
    half = len(sent) // 2
    timings: dict[str, float] = {}
    with RedisServer(tmp_path) as redis:
        env["HOOKD_REDIS_URL"] = redis.url
        with HookdServer(env, tmp_path) as server:
            workers = [HookdWorker(env, tmp_path).start() for _ in range(2)]
            try:
                await wait_for(lambda: _ready(workers), timeout_s=60, interval_s=0.1)
                started = time.monotonic()
                stored = await post(server.url, sent[:half])
                timings["first_half_posted_s"] = time.monotonic() - started

                async def some_run() -> bool:
                    return await count(url, "SELECT count(*) FROM ordering_seen") > 0

                await wait_for(some_run, timeout_s=60, interval_s=0.05)
                redis.stop()  # lost: no more wake-ups, the workers sweep the database
                lost = time.monotonic()
                stored |= await post(server.url, sent[half:])
                timings["second_half_posted_s"] = time.monotonic() - lost

                async def all_done() -> bool:
                    if not all(w.alive() for w in workers):
                        raise AssertionError(f"a worker exited: {workers[0].log()}")
                    left = await count(
                        url,
                        "SELECT count(*) FROM events "
                        "WHERE status NOT IN ('processed', 'superseded')",
                    )
                    return left == 0

                await wait_for(all_done, timeout_s=180, interval_s=0.2, message=workers[0].log)
                timings["done_after_redis_lost_s"] = time.monotonic() - lost
                timings["total_s"] = time.monotonic() - started
                bearer = {"Authorization": f"Bearer {TOKEN}"}
                async with httpx.AsyncClient(timeout=10, headers=bearer) as client:
                    scraped = [(await client.get(w.metrics_url)).text for w in workers]
            finally:
                for worker in workers:
                    worker.stop()
    return Outcome(
        stored=stored,
        status={str(r[0]): str(r[1]) for r in await rows(url, "SELECT id, status FROM events")},
        seen=await rows(
            url,
            "SELECT event_id, object_key, version, started, finished, pid FROM ordering_seen "
            "ORDER BY started",
        ),
        state={
            str(r[0]): (float(str(r[1])), str(r[2]))
            for r in await rows(url, "SELECT object_key, version, event_id FROM source_objects")
        },
        counted_superseded=sum(superseded_counted(text) for text in scraped),
        timings=timings,
    )


async def _ready(workers: list[HookdWorker]) -> bool:
    """Every worker answers on its metrics port: started, and so claiming."""
    async with httpx.AsyncClient(timeout=2) as client:
        for worker in workers:
            if not worker.alive():
                raise AssertionError(f"a worker exited: {worker.log()}")
            try:
                await client.get(worker.metrics_url.replace("/metrics", "/healthz"))
            except httpx.HTTPError:
                return False
    return True


def check(outcome: Outcome, events: int) -> dict[str, int]:
    """``AssertionError`` unless the runs kept the promise; the counts otherwise."""
    stored, status = outcome.stored, outcome.status
    assert len(stored) == events, f"{len(stored)} of {events} stored"
    assert set(status) == set(stored), "the events are not the ones posted"
    processed = {e for e, s in status.items() if s == "processed"}
    superseded = {e for e, s in status.items() if s == "superseded"}
    assert processed | superseded == set(stored), "an event is neither processed nor superseded"
    ran = [str(r[0]) for r in outcome.seen]
    assert len(ran) == len(set(ran)), "a handler ran twice for one event"
    assert set(ran) == processed, "a superseded event ran, or a processed one did not"
    by_object: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for _, obj, version, began, ended, _ in outcome.seen:
        by_object[str(obj)].append((float(str(version)), float(str(began)), float(str(ended))))
    for obj, runs in by_object.items():
        versions = [v for v, _, _ in runs]
        assert versions == sorted(set(versions)), f"{obj} ran out of order: {versions}"
        for (_, _, ended), (_, began, _) in itertools.pairwise(runs):
            assert ended <= began, f"two runs of {obj} overlapped"
    newest: dict[str, int] = defaultdict(int)
    for obj, version in stored.values():
        newest[obj] = max(newest[obj], version)
    ran_versions: dict[str, set[int]] = defaultdict(set)
    for event_id in processed:
        obj, version = stored[event_id]
        ran_versions[obj].add(version)
    for event_id in superseded:  # stale: a newer version of its object had been processed
        obj, version = stored[event_id]
        assert max(ran_versions[obj]) > version, f"{event_id} ({obj} {version}) was not stale"
    for obj, version in newest.items():
        assert version in ran_versions[obj], f"{obj}'s newest version was not processed"
    state = outcome.state
    assert {o: v for o, (v, _) in state.items()} == {o: float(v) for o, v in newest.items()}
    assert all(stored[e] == (o, int(v)) for o, (v, e) in state.items()), "a wrong last event"
    assert outcome.counted_superseded == len(superseded), "superseded events miscounted"
    return {
        "processed": len(processed),
        "superseded": len(superseded),
        "objects": len(by_object),
        "workers": len({r[5] for r in outcome.seen}),
    }
