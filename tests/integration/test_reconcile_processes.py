"""Reconciliation in real processes: ``hookd reconcile`` from cron, killed and re-run,
two at once; the schedule inside ``hookd worker`` (Redis) and ``hookd serve`` (no Redis)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from hookd.sources import parse_sources
from tests.support import handlers
from tests.support.asgi import running_app
from tests.support.constants import SECRETS
from tests.support.data import scalar
from tests.support.emulators import GitHubEmulator, SlackEmulator, StripeEmulator
from tests.support.http import serve_app
from tests.support.reconcile_world import sources_toml
from tests.support.server import ROOT, HookdServer, HookdWorker, RedisServer, free_port
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio
API_TOKEN = "provider-api-token"
HOOK = "repos/octo/hello/hooks/42"


async def reconcile_cli(
    env: dict[str, str], *args: str
) -> tuple[asyncio.subprocess.Process, asyncio.Task[bytes]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hookd.cli",
        "reconcile",
        *args,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HOOKD_LOG_LEVEL": "WARNING", **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    return proc, asyncio.create_task(proc.stdout.read())


async def seeded_github(pg_url: str, count: int, dropped: int) -> tuple[GitHubEmulator, set[str]]:
    """An emulator with ``count`` deliveries, all stored but ``dropped`` of them."""
    emulator = GitHubEmulator(API_TOKEN, hook=HOOK)
    keys = emulator.add_events(count, start=time.time() - 3600, step_s=1.0)
    missing = set(random.Random(5).sample(keys, dropped))
    sources = parse_sources(sources_toml("github", "http://unused"), Path("x.toml"), env={})
    async with running_app(sources, pg_url, reconcile_schedule=False) as (_, client):
        await emulator.send_webhooks(
            client, "http://hookd/hooks/github", SECRETS["github"], drop=missing
        )
    return emulator, missing


async def test_two_reconciles_at_once_one_repairs_the_other_reports_the_lease(
    tmp_path: Path, pg_url: str
) -> None:
    emulator, _ = await seeded_github(pg_url, 500, 50)
    emulator.latency_s = 0.05
    async with serve_app(emulator.app) as api_url:
        config = tmp_path / "hookd.toml"
        config.write_text(sources_toml("github", api_url))
        env = {"HOOKD_CONFIG": str(config), "HOOKD_DATABASE_URL": pg_url}
        runs = [await reconcile_cli(env, "github") for _ in range(2)]
        outputs = [(await out).decode() for _, out in runs]
        codes = [await proc.wait() for proc, _ in runs]
    assert codes == [0, 0], outputs
    joined = "\n".join(outputs)
    assert joined.count("github: succeeded") == 1, joined
    assert joined.count("github: lease_held") == 1, joined
    assert "repaired=50" in joined
    assert await scalar(pg_url, "SELECT count(*) FROM events") == 500
    assert (
        await scalar(pg_url, "SELECT count(*) FROM reconcile_runs WHERE status = 'lease_held'") == 1
    )


async def test_run_killed_midway_then_rerun_repairs_the_rest_once(
    tmp_path: Path, pg_url: str
) -> None:
    emulator, _ = await seeded_github(pg_url, 2000, 200)
    emulator.latency_s = 0.02
    async with serve_app(emulator.app) as api_url:
        config = tmp_path / "hookd.toml"
        config.write_text(sources_toml("github", api_url))
        env = {
            "HOOKD_CONFIG": str(config),
            "HOOKD_DATABASE_URL": pg_url,
            "HOOKD_RECONCILE_LEASE_S": "3",
        }
        proc, out = await reconcile_cli(env, "github")

        async def forty_repaired() -> bool:
            repaired = "SELECT coalesce(sum(items_repaired), 0) FROM reconcile_runs"
            return await scalar(pg_url, repaired) >= 40

        async def output() -> str:
            return (await out).decode()

        await wait_for(forty_repaired, timeout_s=60, message=output)
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        out.cancel()
        repaired_first = await scalar(pg_url, "SELECT sum(items_repaired) FROM reconcile_runs")
        assert 0 < repaired_first < 200, "the kill did not land midway"
        assert (
            await scalar(pg_url, "SELECT count(*) FROM reconcile_state WHERE cursor IS NOT NULL")
            == 0
        ), "the cursor moved past work the killed run never did"
        again, again_out = await reconcile_cli(env, "github", "--wait")
        text = (await again_out).decode()
        assert await again.wait() == 0, text
    assert "github: succeeded" in text
    assert f"repaired={200 - repaired_first}" in text
    assert await scalar(pg_url, "SELECT count(*) FROM events") == 2000
    assert await scalar(pg_url, "SELECT count(DISTINCT dedupe_key) FROM events") == 2000
    assert await scalar(pg_url, "SELECT sum(items_missing) FROM reconcile_runs") == 200
    assert (
        await scalar(pg_url, "SELECT count(*) FROM reconcile_state WHERE cursor IS NOT NULL") == 1
    )


async def test_worker_schedule_reconciles_with_redis(tmp_path: Path, pg_url: str) -> None:
    await handlers.prepare(pg_url)
    emulator = StripeEmulator("sk_test_hookd")
    keys = emulator.add_events(200, start=time.time() - 3600, step_s=1.0)
    dropped = set(random.Random(3).sample(keys, 20))
    async with serve_app(emulator.app) as api_url:
        config = tmp_path / "hookd.toml"
        config.write_text(sources_toml("stripe", api_url))
        env = {"HOOKD_CONFIG": str(config), "HOOKD_DATABASE_URL": pg_url}
        with RedisServer(tmp_path) as redis:
            env["HOOKD_REDIS_URL"] = redis.url
            with HookdServer(env, tmp_path) as server:
                async with httpx.AsyncClient() as client:
                    await emulator.send_webhooks(
                        client, f"{server.url}/hooks/stripe", SECRETS["stripe"], drop=dropped
                    )
                assert await scalar(pg_url, "SELECT count(*) FROM events") == 180
                with HookdWorker(env, tmp_path) as worker:

                    async def all_effects() -> bool:
                        return await scalar(pg_url, "SELECT count(*) FROM effects") >= 200

                    await wait_for(all_effects, timeout_s=90, interval_s=0.3, message=worker.log)
    assert await scalar(pg_url, "SELECT count(*) FROM events WHERE origin = 'reconcile'") == 20
    assert await scalar(pg_url, "SELECT count(*) FROM calls") == 200
    assert (
        await scalar(pg_url, "SELECT count(*) FROM reconcile_runs WHERE trigger = 'schedule'") >= 1
    )


async def test_serve_without_redis_keeps_the_schedule_itself(
    tmp_path: Path, sqlite_url: str
) -> None:
    emulator = StripeEmulator("sk_test_hookd")
    emulator.add_events(30, start=time.time() - 600, step_s=1.0)
    async with serve_app(emulator.app) as api_url:
        config = tmp_path / "hookd.toml"
        config.write_text(
            sources_toml("stripe", api_url).replace(
                'handlers = ["tests.support.handlers:effect_strict"]', ""
            )
        )
        env = {"HOOKD_CONFIG": str(config), "HOOKD_DATABASE_URL": sqlite_url}
        with HookdServer(env, tmp_path) as server:

            async def all_processed() -> bool:
                processed = "SELECT count(*) FROM events WHERE status = 'processed'"
                return await scalar(sqlite_url, processed) >= 30

            await wait_for(all_processed, timeout_s=60, interval_s=0.3, message=server.log)
    assert await scalar(sqlite_url, "SELECT count(*) FROM events WHERE origin = 'reconcile'") == 30


async def test_cli_auth_failures_disable_then_sources_enable_restores(
    tmp_path: Path, sqlite_url: str
) -> None:
    emulator = GitHubEmulator(API_TOKEN, hook=HOOK)
    emulator.add_events(5, start=time.time() - 600, step_s=1.0)
    async with serve_app(emulator.app) as api_url:
        config = tmp_path / "hookd.toml"
        config.write_text(sources_toml("github", api_url, token="revoked-token"))
        env = {"HOOKD_CONFIG": str(config), "HOOKD_DATABASE_URL": sqlite_url}

        async def cli(*args: str) -> tuple[int, str]:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "hookd.cli",
                *args,
                env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            out, _ = await proc.communicate()
            return proc.returncode or 0, out.decode()

        for _ in range(3):
            code, out = await cli("reconcile", "github")
            assert code == 1
            assert "auth_failed" in out
        code, listing = await cli("sources", "list")
        assert code == 0
        assert "disabled" in listing
        assert "authentication failures" in listing
        calls = emulator.api_calls
        code, out = await cli("reconcile", "github")
        assert (code, emulator.api_calls) == (1, calls)
        assert "github: disabled" in out

        config.write_text(sources_toml("github", api_url))
        code, out = await cli("sources", "enable", "github")
        assert (code, out.strip()) == (0, "github: reconciliation enabled")
        code, out = await cli("reconcile", "github")
    assert code == 0, out
    assert "github: succeeded" in out
    assert "repaired=5" in out


@pytest.mark.parametrize(
    ("provider", "path"),
    [
        ("slack", "/auth.test"),
        ("github", f"/{HOOK}/deliveries"),
        ("stripe", "/v1/events"),
    ],
)
async def test_unreachable_provider_api_fails_the_run_in_seconds_naming_the_url(
    tmp_path: Path, sqlite_url: str, provider: str, path: str
) -> None:
    """Slack's pacing (a request a minute by default) is for requests Slack answered:
    retries of a refused connection do not wait on it."""
    api_url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = tmp_path / "hookd.toml"
    config.write_text(sources_toml(provider, api_url).replace("requests_per_minute = 6000", ""))
    env = {"HOOKD_CONFIG": str(config), "HOOKD_DATABASE_URL": sqlite_url}
    proc, out = await reconcile_cli(env, provider)
    try:
        code = await asyncio.wait_for(proc.wait(), 15)
    except TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise AssertionError(f"still running after 15 s: {(await out).decode()}") from None
    text = (await out).decode()
    assert code == 1, text
    [line] = [x for x in text.splitlines() if x.startswith(f"{provider}: failed")]
    assert "provider_unreachable: connection refused" in line, line
    assert f"{api_url}{path}" in line, line
    assert "per_page" not in line and API_TOKEN not in text


async def test_sigterm_records_the_cli_run_failed_and_gives_the_lease_back(
    tmp_path: Path, pg_url: str
) -> None:
    """A CronJob's deadline: SIGTERM while the run waits on a slow API."""
    emulator = GitHubEmulator(API_TOKEN, hook=HOOK)
    emulator.add_events(5, start=time.time() - 600, step_s=1.0)
    emulator.latency_s = 3600
    async with serve_app(emulator.app) as api_url:
        config = tmp_path / "hookd.toml"
        config.write_text(sources_toml("github", api_url))
        env = {"HOOKD_CONFIG": str(config), "HOOKD_DATABASE_URL": pg_url}
        proc, out = await reconcile_cli(env, "github", "--wait")

        async def api_called() -> bool:
            assert proc.returncode is None, (await out).decode()
            return emulator.api_calls >= 1

        async def output() -> str:
            return (await out).decode()

        await wait_for(api_called, timeout_s=60, message=output)
        assert await scalar(pg_url, "SELECT count(*) FROM reconcile_runs WHERE status = 'running'")
        proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(proc.wait(), 30)
        finally:
            emulator.cut_latency()
        text = (await out).decode()
    assert code == 128 + signal.SIGTERM, text
    assert "interrupted by SIGTERM" in text
    assert "recorded as failed" in text, text
    assert "Traceback" not in text
    assert (
        await scalar(
            pg_url,
            "SELECT count(*) FROM reconcile_runs WHERE status = 'failed' "
            "AND error = 'interrupted by SIGTERM' AND finished_at IS NOT NULL",
        )
        == 1
    )
    assert await scalar(pg_url, "SELECT count(*) FROM reconcile_runs") == 1
    assert (
        await scalar(pg_url, "SELECT count(*) FROM reconcile_state WHERE lease_owner IS NOT NULL")
        == 0
    ), "the lease was given back: the next run need not wait for it to expire"
    assert (
        await scalar(pg_url, "SELECT count(*) FROM reconcile_state WHERE cursor IS NOT NULL") == 0
    )


async def test_cli_logs_its_progress_page_by_page(tmp_path: Path, sqlite_url: str) -> None:
    """``hookd reconcile`` over a slow, paced API says what it is doing while it waits."""
    emulator = SlackEmulator(API_TOKEN, channels=["C0HOOKD", "C1HOOKD"])
    emulator.add_events(40, start=time.time() - 600, step_s=1.0)
    async with serve_app(emulator.app) as api_url:
        config = tmp_path / "hookd.toml"
        config.write_text(sources_toml("slack", api_url))
        env = {
            "HOOKD_CONFIG": str(config),
            "HOOKD_DATABASE_URL": sqlite_url,
            "HOOKD_LOG_LEVEL": "INFO",
        }
        proc, out = await reconcile_cli(env, "slack", "--dry-run")
        text = (await out).decode()
        assert await proc.wait() == 0, text
    progress = [x for x in text.splitlines() if " reconciling " in x and "source=slack" in x]
    assert len(progress) >= 2, text
    assert "page=1 " in progress[0], progress[0]
    assert "page=2 " in progress[1], progress[1]
