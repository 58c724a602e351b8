"""A sender going silent, then heard from again, on a real ``hookd serve`` (two
receiver processes, each keeping the silence watch's schedule) on SQLite and on
PostgreSQL, with ``[sources.expect]`` windows of 2 s:

- windows with traffic are judged heard: ``hookd coverage`` over them exits 0;
- the silent windows become one hole in the coverage ledger (reason ``silent``),
  extended window by window, each window judged once; ``hookd coverage`` exits 1 over
  it and says ``silent``; ``hookd_source_silent_seconds`` rises; the ``coverage_hole``
  alert opens, naming the reason;
- the first webhook after it ends the silence: the gauge is back to 0 and the alert
  resolves, while the hole stays in the ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from tests.support.constants import SECRETS
from tests.support.data import engine_of
from tests.support.deliveries import github
from tests.support.server import ROOT, HookdServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio
TOKEN = "silence-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WINDOW_S = 2


def sources_file(tmp_path: Path) -> Path:
    path = tmp_path / "hookd.toml"
    path.write_text(
        "\n".join(
            [
                "[[sources]]",
                'name = "github"',
                'provider = "github"',
                f'secrets = ["{SECRETS["github"]}"]',
                "[sources.expect]",
                "min_events = 1",
                f"window_s = {WINDOW_S}",
                "",
                "[alerts]",
                "evaluate_every_s = 1",
                "group_s = 0",
                "",
            ]
        )
    )
    return path


async def rows(url: str, sql: str) -> list[sa.Row[object]]:
    async with engine_of(url) as engine, engine.connect() as conn:
        return list(await conn.execute(sa.text(sql)))


async def watch(url: str) -> sa.Row[object] | None:
    found = await rows(url, "SELECT judged_until, silent_since FROM source_watch")
    return found[0] if found else None


async def silent_rows(url: str) -> list[sa.Row[object]]:
    return await rows(
        url,
        "SELECT start_at, end_at, reason FROM reconcile_coverage "
        "WHERE outcome = 'silent' ORDER BY start_at",
    )


def ts(value: object) -> float:
    """A time column read back through plain SQL, in unix seconds."""
    if isinstance(value, str):  # SQLite keeps text
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


async def gauge(client: httpx.AsyncClient) -> float:
    text = (await client.get("/metrics", headers=AUTH)).text
    found = re.search(r'^hookd_source_silent_seconds\{source="github"\} (\S+)$', text, re.M)
    assert found is not None, "hookd_source_silent_seconds{source=github} not exported"
    return float(found.group(1))


async def alert(url: str) -> sa.Row[object] | None:
    found = await rows(
        url, "SELECT status, summary FROM alerts WHERE kind = 'coverage_hole' ORDER BY id DESC"
    )
    return found[0] if found else None


def coverage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hookd.cli", "coverage", "github", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@contextlib.asynccontextmanager
async def sending(client: httpx.AsyncClient, every_s: float) -> AsyncIterator[list[float]]:
    """A webhook every ``every_s`` while inside; when each was accepted."""
    accepted: list[float] = []

    async def loop() -> None:
        n = 0
        while True:
            n += 1
            headers, body = github(f"s-{time.time_ns()}-{n}")
            response = await client.post("/hooks/github", content=body, headers=headers)
            assert response.status_code == 202, response.text
            accepted.append(time.time())
            await asyncio.sleep(every_s)

    task = asyncio.create_task(loop())
    try:
        yield accepted
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_sender_silent_then_heard_again(db_url: str, tmp_path: Path) -> None:
    config = sources_file(tmp_path)
    env = {"HOOKD_CONFIG": str(config), "HOOKD_DATABASE_URL": db_url}
    serve_env = {**env, "HOOKD_ADMIN_TOKEN": TOKEN, "HOOKD_PROCESSORS": "0"}
    with HookdServer(serve_env, tmp_path, workers=2) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            # Traffic: two whole windows after the first webhook are judged heard.
            async with sending(client, 0.3) as accepted:
                await wait_for(lambda: accepted, timeout_s=10, message="nothing accepted")
                heard_from = math.ceil(accepted[0] / WINDOW_S) * WINDOW_S
                heard_to = heard_from + 2 * WINDOW_S

                async def judged_past_heard() -> bool:
                    state = await watch(db_url)
                    return state is not None and ts(state[0]) >= heard_to

                await wait_for(judged_past_heard, timeout_s=30, interval_s=0.2)
            stopped = time.time()
            assert await gauge(client) == 0.0
            assert not [r for r in await silent_rows(db_url) if ts(r[1]) > heard_from]
            since = datetime.fromtimestamp(heard_from, UTC).isoformat()
            until = datetime.fromtimestamp(heard_to, UTC).isoformat()
            heard = await asyncio.to_thread(coverage, env, "--since", since, "--until", until)
            assert heard.returncode == 0, heard.stdout + heard.stderr
            assert "fully checked" in heard.stdout

            # Silence: the windows after the last webhook's are silent, one hole.
            async def silent_for(windows: int) -> list[sa.Row[object]]:
                found = [r for r in await silent_rows(db_url) if ts(r[1]) > stopped]
                if found and ts(found[-1][1]) - ts(found[-1][0]) >= windows * WINDOW_S:
                    return found
                return []

            found = await wait_for(lambda: silent_for(1), timeout_s=30, interval_s=0.2)
            first = await gauge(client)
            assert first >= WINDOW_S
            opened = await wait_for(lambda: alert(db_url), timeout_s=30, interval_s=0.2)
            assert opened[0] == "open"
            assert "silent" in str(opened[1])
            found = await wait_for(lambda: silent_for(3), timeout_s=30, interval_s=0.2)
            assert len(found) == 1  # consecutive silent windows extend one interval
            start, end, reason = found[0]
            assert ts(start) % WINDOW_S == 0 and ts(end) % WINDOW_S == 0
            assert "fewer than 1 event" in str(reason)
            assert await gauge(client) > first  # rising while silent
            holes = await asyncio.to_thread(coverage, env)
            assert holes.returncode == 1, holes.stdout + holes.stderr
            assert "silent: fewer than 1 event" in holes.stdout
            state = await watch(db_url)
            assert state is not None and ts(state[1]) == ts(start)

            # Heard from again: the first webhook ends the silence.
            headers, body = github("back-again")
            response = await client.post("/hooks/github", content=body, headers=headers)
            assert response.status_code == 202

            async def back_to_zero() -> bool:
                return await gauge(client) == 0.0

            await wait_for(back_to_zero, timeout_s=30, interval_s=0.2)

            async def resolved() -> bool:
                found = await alert(db_url)
                return found is not None and found[0] == "resolved"

            await wait_for(resolved, timeout_s=30, interval_s=0.2)
            state = await watch(db_url)
            assert state is not None and state[1] is None
            # The hole stays: coverage still says so, as the ledger does.
            after = await asyncio.to_thread(coverage, env)
            assert after.returncode == 1, after.stdout + after.stderr
    # Every window judged once, by whichever receiver held the lease: no two silent
    # intervals overlap, and each lies on window boundaries.
    intervals = [(ts(r[0]), ts(r[1])) for r in await silent_rows(db_url)]
    for (_, end_a), (start_b, _) in itertools.pairwise(intervals):
        assert end_a <= start_b
