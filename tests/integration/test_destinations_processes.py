"""Destinations with real processes: a rate limit held across two ``hookd worker``s
sharing Redis, a source paused under a burst of webhooks to ``hookd serve``, and the
command line and API that pause and resume. Destinations are real HTTP servers on
loopback that verify every signature."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from store.crypto import BodyCipher
from store.intake.events import NewEvent, insert_events
from tests.support.cli import hookd_async
from tests.support.constants import STRIPE_SECRET
from tests.support.data import engine_of, scalar
from tests.support.destinations import Destination, app, max_in_window, whsec
from tests.support.http import serve_app
from tests.support.server import HookdServer, HookdWorker, RedisServer
from tests.support.signing import signed_request
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]
TOKEN = "destinations-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RATE = 50


def config(path: Path, base: str, extra: str = "") -> Path:
    path.write_text(
        f"""
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{STRIPE_SECRET}"]

[[sources.destinations]]
name = "sink"
url = "{base}/sink"
allow_insecure = true
secret = "{whsec("sink")}"
{extra}
"""
    )
    return path


def env_for(path: Path, url: str, **extra: str) -> dict[str, str]:
    return {
        "HOOKD_CONFIG": str(path),
        "HOOKD_DATABASE_URL": url,
        "HOOKD_ADMIN_TOKEN": TOKEN,
        "HOOKD_RECONCILE_SCHEDULE": "false",
        "HOOKD_PRUNE_EVERY_S": "0",
        "HOOKD_SWEEP_S": "0.2",
        **extra,
    }


async def hookd(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    """``hookd ARGS`` in a subprocess, without blocking the loop the destination runs in."""
    return await hookd_async(env, *args)


def stripe_event(i: int) -> bytes:
    return json.dumps(
        {"id": f"evt_burst_{i}", "type": "invoice.paid", "created": int(time.time())}
    ).encode()


async def test_a_paused_source_stores_and_acknowledges_a_burst_and_resume_processes_each_once(
    tmp_path: Path, pg_url: str
) -> None:
    sink = Destination(whsec("sink"))
    async with serve_app(app({"sink": sink})) as base:
        env = env_for(config(tmp_path / "hookd.toml", base), pg_url)
        with HookdServer(env, tmp_path) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                paused = await client.post("/api/sources/stripe/pause?reason=burst", headers=AUTH)
                assert paused.status_code == 200, paused.text
                assert paused.json()["paused"] is True
                assert paused.json()["pause"]["by"] == "api token:admin"
                gate = asyncio.Semaphore(32)

                async def send(i: int) -> int:
                    body = stripe_event(i)
                    headers, _ = signed_request(
                        "stripe", STRIPE_SECRET, body, ts=str(int(time.time()))
                    )
                    async with gate:
                        answer = await client.post(
                            "/hooks/stripe",
                            content=body,
                            headers={k: v[0] for k, v in headers.items()},
                        )
                    return answer.status_code

                codes = await asyncio.gather(*(send(i) for i in range(300)))
                assert codes == [202] * 300
                # Several sweeps later: every event stored, none claimed, none delivered.
                await asyncio.sleep(1.5)
                assert await scalar(pg_url, "SELECT count(*) FROM events") == 300
                assert (
                    await scalar(
                        pg_url,
                        "SELECT count(*) FROM events WHERE status = 'pending' AND attempts = 0",
                    )
                    == 300
                )
                assert sink.accepted == [] and sink.refused == []
                code, out, err = await hookd(env, "sources", "resume", "stripe")
                assert (code, out.strip()) == (0, "stripe: processing resumed"), err
                assert "Traceback" not in err

                async def all_delivered() -> bool:
                    return len(sink.accepted) >= 300 and (
                        await scalar(
                            pg_url, "SELECT count(*) FROM events WHERE status = 'processed'"
                        )
                        == 300
                    )

                await wait_for(all_delivered, timeout_s=60, interval_s=0.1)
                sources = (await client.get("/api/sources", headers=AUTH)).json()["sources"]
    ids = sink.ids()
    assert len(ids) == 300 and len(set(ids)) == 300 and not sink.unsigned
    [stripe] = sources
    assert stripe["paused"] is False and stripe["pause"]["by"].startswith("cli")
    assert stripe["destinations"][0]["waiting"] == 0


async def test_a_destination_limited_to_50_a_second_never_exceeds_it_across_two_workers(
    tmp_path: Path, pg_url: str
) -> None:
    sink = Destination(whsec("sink"))
    count = 200
    async with serve_app(app({"sink": sink})) as base:
        path = config(tmp_path / "hookd.toml", base, f"rate_per_s = {RATE}\n")
        with RedisServer(tmp_path) as redis:
            # Small batches: both workers keep claiming while the limit holds them back.
            env = env_for(
                path,
                pg_url,
                HOOKD_REDIS_URL=redis.url,
                HOOKD_METRICS_TOKEN="m-tok",
                HOOKD_PROCESS_BATCH="16",
            )
            now = datetime.now(UTC)
            async with engine_of(pg_url) as engine, engine.begin() as conn:
                await insert_events(
                    conn,
                    [
                        NewEvent(
                            source="stripe",
                            provider="stripe",
                            dedupe_key=f"evt_rate_{i}",
                            type="invoice.paid",
                            origin="webhook",
                            received_at=now + timedelta(microseconds=i),
                            occurred_at=None,
                            verified_with="stripe-v1;key=0",
                            headers={},
                            body=stripe_event(i),
                        )
                        for i in range(count)
                    ],
                    BodyCipher(""),
                )
            with HookdWorker(env, tmp_path) as one, HookdWorker(env, tmp_path) as two:

                async def delivered() -> bool:
                    assert one.alive(), one.log()
                    assert two.alive(), two.log()
                    return len(sink.accepted) >= count

                await wait_for(delivered, timeout_s=90, interval_s=0.1)
                per_worker = [await _delivered(w.metrics_url) for w in (one, two)]
    times = [d.at for d in sink.accepted]
    most = max_in_window(times, 1.0)
    assert most <= RATE, most
    assert len(set(sink.ids())) == count and not sink.unsigned
    # Both workers delivered: the limit held across them, not within one.
    assert sum(per_worker) == count and min(per_worker) > 0, per_worker


async def _delivered(metrics_url: str) -> int:
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(metrics_url, headers={"Authorization": "Bearer m-tok"})).text
    for family in text_string_to_metric_families(text):
        if family.name == "hookd_destination_deliveries":
            return int(
                sum(
                    s.value
                    for s in family.samples
                    if s.name.endswith("_total") and s.labels["outcome"] == "delivered"
                )
            )
    raise AssertionError("no hookd_destination_deliveries_total")


async def test_the_command_line_pauses_lists_and_resumes_a_destination(
    tmp_path: Path, sqlite_url: str
) -> None:
    env = env_for(config(tmp_path / "hookd.toml", "http://127.0.0.1:9"), sqlite_url)
    code, out, err = await hookd(env, "destinations", "pause", "stripe/sink", "--reason", "slow")
    assert (code, out.strip()) == (0, "stripe/sink: paused"), err
    code, out, _ = await hookd(env, "destinations", "list", "--json")
    [listed] = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and listed["paused"] is True and listed["pause"]["reason"] == "slow"
    assert listed["pause"]["by"].startswith("cli") and listed["breaker"]["state"] == "closed"
    code, out, _ = await hookd(env, "destinations", "resume", "stripe/sink")
    assert (code, out.strip()) == (0, "stripe/sink: resumed")
    code, out, err = await hookd(env, "destinations", "pause", "stripe/nope")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "no destination 'stripe/nope'" in err
