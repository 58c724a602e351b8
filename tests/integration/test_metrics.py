"""``/metrics`` from real processes: a two-process ``hookd serve`` (prometheus-client
multiprocess mode) counts every request once whichever process answers the scrape,
and ``hookd worker`` serves its own processing families behind the same token."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hookd.providers.signing import sample_event
from tests.support.constants import SECRETS
from tests.support.deliveries import send, wait_processed
from tests.support.handlers import config, prepare, prepared_env
from tests.support.server import ROOT, HookdServer, HookdWorker, RedisServer

pytestmark = pytest.mark.anyio
TOKEN = "metrics-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def scrape(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    # A new connection per scrape, so the kernel may hand it to either process.
    async with httpx.AsyncClient(timeout=10, headers={"Connection": "close"}) as client:
        return await client.get(url, headers=AUTH if headers is None else headers)


async def send_one_per_connection(
    url: str, requests: list[tuple[dict[str, str], bytes]]
) -> list[int]:
    queue = list(requests)
    statuses: list[int] = []

    async def sender() -> None:
        while queue:
            headers, body = queue.pop()
            async with httpx.AsyncClient(timeout=30) as client:
                response = await client.post(
                    url + "/hooks/github", content=body, headers={**headers, "Connection": "close"}
                )
            statuses.append(response.status_code)

    await asyncio.gather(*(sender() for _ in range(16)))
    return statuses


async def test_two_process_server_counts_every_request_once(tmp_path: Path, pg_url: str) -> None:
    await prepare(pg_url)
    metrics_dir = tmp_path / "prom"
    env = {
        "HOOKD_CONFIG": str(config(tmp_path, "effect_strict")),
        "HOOKD_DATABASE_URL": pg_url,
        "HOOKD_ADMIN_TOKEN": TOKEN,
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        # One processor process beside the two receivers, whatever the machine's cores.
        "HOOKD_PROCESSORS": "1",
    }
    metrics_dir.mkdir()
    (metrics_dir / "counter_1.db").write_bytes(b"stale")  # a previous run's file is removed
    accepted, duplicates, rejected = 300, 40, 25
    unique = [sample_event("github", SECRETS["github"], i) for i in range(accepted)]
    forged = [sample_event("github", "not-the-secret", 10_000 + i) for i in range(rejected)]
    with HookdServer(env, tmp_path, workers=2) as server:
        statuses = await send_one_per_connection(server.url, unique + unique[:duplicates] + forged)
        assert sorted(statuses) == [200] * duplicates + [202] * accepted + [401] * rejected
        await wait_processed(pg_url, accepted)

        pids = {p.stem.rsplit("_", 1)[1] for p in metrics_dir.glob("counter_*.db")}
        # Both receiver processes answered requests; the processor process processed.
        assert len(pids) == 3, f"both receivers and the processor should count: {pids}"
        for _ in range(8):
            response = await scrape(server.url + "/metrics")
            assert response.status_code == 200
            found = samples(response.text)
            received = "hookd_webhooks_received_total"
            assert value(found, received, source="github", outcome="accepted") == accepted
            assert value(found, received, source="github", outcome="duplicate") == duplicates
            assert value(found, received, source="github", outcome="rejected") == rejected
            assert (
                value(
                    found, "hookd_webhook_rejections_total", source="github", reason="bad_signature"
                )
                == rejected
            )
            assert value(found, "hookd_ack_seconds_count", source="github") == accepted + duplicates
            assert (
                value(found, "hookd_ack_seconds_bucket", source="github", le="10.0")
                == accepted + duplicates
            )
            # Every stored delivery waited for one group commit, each of one or more of them.
            commits = value(found, "hookd_commit_seconds_count", outcome="committed")
            assert 1 <= commits <= accepted + duplicates
            assert value(found, "hookd_commit_seconds_sum", outcome="committed") > 0
            assert value(found, "hookd_commit_seconds_count", outcome="failed") == 0
            # The processor process processed them; every receiver's scrape shows it.
            processed = "hookd_events_processed_total"
            assert value(found, processed, source="github", outcome="processed") == accepted
            assert value(found, "hookd_processing_seconds_count", source="github") == accepted
            # Database-backed families are there once, not once per process.
            assert value(found, "hookd_events_pending") == 0
            assert value(found, "hookd_events_dead") == 0

        for headers in ({}, {"Authorization": "Bearer wrong"}):
            assert (await scrape(server.url + "/metrics", headers)).status_code == 401
    assert not (metrics_dir / "counter_1.db").exists()


async def test_worker_serves_its_processing_metrics_behind_the_token(
    tmp_path: Path, pg_url: str
) -> None:
    env = await prepared_env(tmp_path, pg_url, "effect_strict", HOOKD_ADMIN_TOKEN=TOKEN)
    count = 120
    with RedisServer(tmp_path) as redis:
        env["HOOKD_REDIS_URL"] = redis.url
        with HookdServer(env, tmp_path) as server, HookdWorker(env, tmp_path) as worker:
            statuses = await send(
                server.url, [sample_event("github", SECRETS["github"], i) for i in range(count)]
            )
            assert statuses == [202] * count
            await wait_processed(pg_url, count)
            found = samples((await scrape(worker.metrics_url)).text)
            processed = "hookd_events_processed_total"
            assert value(found, processed, source="github", outcome="processed") == count
            assert value(found, "hookd_processing_seconds_count", source="github") == count
            # The receiver did no processing: Redis woke the worker instead.
            at_receiver = samples((await scrape(server.url + "/metrics")).text)
            assert value(at_receiver, processed, source="github", outcome="processed") == 0
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                assert (await scrape(worker.metrics_url, headers)).status_code == 401
            async with httpx.AsyncClient() as client:
                health = await client.get(worker.metrics_url.replace("/metrics", "/healthz"))
            assert health.status_code == 200


def test_worker_with_a_taken_metrics_port_stops_with_one_line(
    tmp_path: Path, sqlite_url: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "hookd.cli", "worker"],
            check=False,
            env={
                "PATH": "/usr/bin:/bin",
                "PYTHONPATH": str(ROOT),
                "HOOKD_DATABASE_URL": sqlite_url,
                "HOOKD_REDIS_URL": "redis://127.0.0.1:1/0",
                "HOOKD_CONFIG": str(config(tmp_path, "effect_strict")),
                "HOOKD_WORKER_METRICS_PORT": str(port),
            },
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2, result.stderr
    assert "HOOKD_WORKER_METRICS_PORT" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
