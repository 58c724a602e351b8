"""A reconcile test's world: hookd in-process on a database, one source reconciled
against an emulated provider API on loopback, driven through the operations API.

``test_reconcile.py`` and ``test_reconcile_paddle_square_gitlab.py`` build their
``world`` fixtures on it. The GitHub, Stripe and Slack emulators and their sources file
(``sources_toml``) are here too: the tests of processes, tracing and the checklist
reconcile those sources as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import httpx
import pytest

from hookd.sources import Sources, parse_sources
from tests.support import handlers
from tests.support.asgi import running_app
from tests.support.constants import SECRETS
from tests.support.data import scalar
from tests.support.emulators import GitHubEmulator, SlackEmulator, StripeEmulator
from tests.support.http import serve_app
from tests.support.waiting import wait_for

TOKEN = "admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
API_TOKEN = "provider-api-token"
STRIPE_KEY = "sk_test_hookd"
HOOK = "repos/octo/hello/hooks/42"

Emulator = GitHubEmulator | StripeEmulator | SlackEmulator


def make_emulator(provider: str) -> Emulator:
    if provider == "github":
        return GitHubEmulator(API_TOKEN, hook=HOOK)
    if provider == "stripe":
        return StripeEmulator(STRIPE_KEY)
    return SlackEmulator(API_TOKEN, channels=["C0HOOKD", "C1HOOKD"])


def sources_toml(provider: str, api_url: str, token: str | None = None, extra: str = "") -> str:
    secret = SECRETS[provider]
    token = token or (STRIPE_KEY if provider == "stripe" else API_TOKEN)
    specific = {
        "github": f'hook = "{HOOK}"',
        "stripe": "",
        "slack": 'channels = ["C0HOOKD", "C1HOOKD"]\nrequests_per_minute = 6000',
    }[provider]
    return f"""
[[sources]]
name = "{provider}"
provider = "{provider}"
secrets = ["{secret}"]
handlers = ["tests.support.handlers:effect_strict"]

[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true
token = "{token}"
lookback_s = 86400
overlap_s = 120
{specific}
{extra}
"""


async def run_to_end(
    client: httpx.AsyncClient, provider: str, headers: dict[str, str], *, dry_run: bool = False
) -> dict[str, Any]:
    """One reconcile run of ``provider`` started through the operations API and polled
    until done (a minute at most): the finished run resource."""
    query = "?dry_run=true" if dry_run else ""
    started = await client.post(f"/api/sources/{provider}/reconcile{query}", headers=headers)
    assert started.status_code == 202, started.text
    path = f"/api/reconcile-runs/{started.json()['id']}"

    async def done() -> dict[str, Any]:
        run: dict[str, Any] = (await client.get(path, headers=headers)).json()
        return run if run["done"] else {}

    run: dict[str, Any] = await wait_for(done, timeout_s=60, interval_s=0.05)
    return run


E = TypeVar("E")


@dataclass
class ReconcileWorld(Generic[E]):
    provider: str
    emulator: E
    api_url: str
    sources: Sources
    client: httpx.AsyncClient
    db_url: str

    # How many times (0.1 s apart) ``reconcile`` asks whether its run is done.
    polls: ClassVar[int] = 600

    async def scalar(self, sql: str) -> int:
        return await scalar(self.db_url, sql)

    async def reconcile(self, dry_run: bool = False) -> dict[str, Any]:
        """One pass through the operations API; the finished run resource."""
        query = "?dry_run=true" if dry_run else ""
        started = await self.client.post(
            f"/api/sources/{self.provider}/reconcile{query}", headers=AUTH
        )
        assert started.status_code == 202, started.text
        run: dict[str, Any] = started.json()
        assert run["name"] == f"reconcile-runs/{run['id']}"
        for _ in range(self.polls):
            run = (await self.client.get(f"/api/reconcile-runs/{run['id']}", headers=AUTH)).json()
            if run["done"]:
                return run
            await asyncio.sleep(0.1)
        raise AssertionError(f"run not done: {run}")

    async def metric(self, name: str) -> float:
        text = (await self.client.get("/metrics", headers=AUTH)).text
        match = re.search(rf'^{name}\{{source="{self.provider}"\}} (\S+)$', text, re.M)
        assert match, f"{name} missing"
        return float(match.group(1))

    async def wait_processed(self, count: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if await self.scalar("SELECT count(*) FROM events WHERE status = 'processed'") >= count:
                return
            await asyncio.sleep(0.2)
        raise AssertionError("events not processed in time")


W = TypeVar("W", bound=ReconcileWorld[Any])


@contextlib.asynccontextmanager
async def running_world(
    world: type[W],
    provider: str,
    emulator: Any,
    sources_toml: Any,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[W]:
    """``world`` for ``provider``: the handlers' tables in ``db_url`` (which the
    handlers are told of), ``emulator`` served on loopback, and hookd on ``db_url`` with
    the sources file ``sources_toml(api_url)`` makes, the schedule off."""
    monkeypatch.setenv("HOOKD_DATABASE_URL", db_url)
    await handlers.prepare(db_url)
    async with serve_app(emulator.app) as api_url:
        sources = parse_sources(sources_toml(api_url), Path("reconcile.toml"), env={})
        async with running_app(
            sources, db_url, admin_token=TOKEN, sweep_s=0.1, reconcile_schedule=False
        ) as (_, client):
            yield world(provider, emulator, api_url, sources, client, db_url)
