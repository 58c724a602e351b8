"""``hookd worker`` stops on SIGTERM even while it waits for jobs after losing Redis."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.integration.test_reconcile import sources_toml
from tests.support.data import scalar
from tests.support.emulators import StripeEmulator
from tests.support.http import serve_app
from tests.support.server import HookdWorker, RedisServer
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.redis]


async def test_sigterm_after_redis_loss_stops_a_scheduled_run_waiting_on_its_provider(
    tmp_path: Path, pg_url: str
) -> None:
    """Redis gone while a scheduled run waits on a silent provider: SIGTERM still ends the
    worker in time and the run is recorded failed, not left running."""
    emulator = StripeEmulator("sk_test_hookd")
    emulator.add_events(5, start=time.time() - 600, step_s=1.0)
    emulator.latency_s = 3600
    async with serve_app(emulator.app) as api_url:
        config = tmp_path / "hookd.toml"
        config.write_text(sources_toml("stripe", api_url))
        env = {"HOOKD_CONFIG": str(config), "HOOKD_DATABASE_URL": pg_url}
        redis = RedisServer(tmp_path).start()
        env["HOOKD_REDIS_URL"] = redis.url
        with HookdWorker(env, tmp_path) as worker:

            def api_called() -> bool:
                assert worker.alive(), worker.log()
                return emulator.api_calls >= 1

            await wait_for(api_called, timeout_s=60, interval_s=0.1, message=worker.log)
            # arq's loop fails on its next poll; the worker then waits for its jobs in
            # flight, which is where a SIGTERM used to go unheard.
            redis.stop()
            await asyncio.sleep(1.5)
            assert worker.alive(), worker.log()
            started = time.monotonic()
            try:
                await asyncio.to_thread(worker.stop)  # SIGTERM; SIGKILL after 15 s
            finally:
                emulator.cut_latency()
            stopped_in_s = time.monotonic() - started
            assert worker.proc is not None
            returncode = worker.proc.returncode
            log = worker.log()
    assert stopped_in_s < 10, log
    assert returncode == 0, log
    assert (
        await scalar(
            pg_url,
            "SELECT count(*) FROM reconcile_runs WHERE trigger = 'schedule' "
            "AND status = 'failed' AND error = 'interrupted by SIGTERM'",
        )
        == 1
    ), log
    assert await scalar(pg_url, "SELECT count(*) FROM reconcile_runs WHERE status = 'running'") == 0
