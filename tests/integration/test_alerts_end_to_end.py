"""Alerts opened and resolved by their real causes, and told to real channels.

On the Quickstart default (``hookd serve`` alone on SQLite, its processor process
beside it) and with a worker (PostgreSQL, Redis, ``hookd serve`` ingesting and ``hookd
worker`` processing and keeping the schedules):

- a handler that fails until fixed: its events go dead, the ``dead`` alert opens, and
  one message reaches each channel (Slack's shape, PagerDuty's trigger, a webhook
  signed with Standard Webhooks and verified here); fixed and replayed, the alert
  resolves by itself and each channel hears that once (PagerDuty: resolve, same key);
- a destination that is down, then up: ``breaker_open`` opens, then resolves.

On the Quickstart default only: pruning that falls behind its schedule
(``prune_behind``), and two ``hookd serve`` processes on one database, one stopped
mid-send and started again: every message arrives once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from tests.support import handlers
from tests.support.admin import login
from tests.support.constants import SECRETS
from tests.support.data import engine_of
from tests.support.deliveries import github
from tests.support.notify_sink import Sink, notify_sink
from tests.support.server import ROOT, HookdServer, HookdWorker, RedisServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio
TOKEN = "alerts-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WHSEC = "whsec_" + base64.b64encode(b"alerts-webhook-secret-32-bytes!!").decode()


def sources_file(
    tmp_path: Path,
    sink: Sink,
    *,
    handler: str = "until_fixed",
    destination: str | None = None,
    alerts: str = "",
    kinds: str = "",
) -> Path:
    """One GitHub source, the handler, maybe a destination; channels on ``sink``."""
    lines = [
        "[[sources]]",
        'name = "github"',
        'provider = "github"',
        f'secrets = ["{SECRETS["github"]}"]',
        "max_attempts = 1",
    ]
    if handler:
        lines.append(f'handlers = ["tests.support.handlers:{handler}"]')
    if destination:
        lines += [
            "[[sources.destinations]]",
            'name = "billing"',
            f'url = "{destination}"',
            f'secret = "{WHSEC}"',
            "allow_insecure = true",
            "max_attempts = 2",
            "retry_base_s = 0.05",
            "retry_cap_s = 0.1",
            "breaker = { failures = 2, cooldown_s = 1 }",
        ]
    lines += [
        "",
        "[alerts]",
        "evaluate_every_s = 1",
        "group_s = 0",
        alerts,
        "",
        "[[notify]]",
        'name = "ops-slack"',
        'kind = "slack"',
        f'url = "{sink.url}/slack"',
        "allow_insecure = true",
        kinds,
        "",
        "[[notify]]",
        'name = "pager"',
        'kind = "pagerduty"',
        f'url = "{sink.url}/pagerduty"',
        'routing_key = "R0UT1NGKEY0123456789012345678901"',
        "allow_insecure = true",
        "",
        "[[notify]]",
        'name = "hooks"',
        'kind = "webhook"',
        f'url = "{sink.url}/webhook"',
        f'secret = "{WHSEC}"',
        "allow_insecure = true",
    ]
    path = tmp_path / "hookd.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def verified(received: object) -> dict[str, object]:
    """A webhook message checked as any Standard Webhooks receiver checks it."""
    headers = received.headers  # type: ignore[attr-defined]
    body: bytes = received.body  # type: ignore[attr-defined]
    key = base64.b64decode(WHSEC.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    offered = [
        s.split(",", 1)[1] for s in headers["webhook-signature"].split() if s.startswith("v1,")
    ]
    assert any(hmac.compare_digest(expected, s) for s in offered), "signature does not verify"
    payload: dict[str, object] = json.loads(body)
    return payload


@dataclass
class Deployment:
    url: str  # the database
    server: HookdServer


@contextlib.contextmanager
def deployed(kind: str, db_url: str, tmp_path: Path, config: Path) -> Iterator[Deployment]:
    env = {
        "HOOKD_CONFIG": str(config),
        "HOOKD_DATABASE_URL": db_url,
        "HOOKD_ADMIN_TOKEN": TOKEN,
        "HOOKD_SWEEP_S": "1",
    }
    if kind == "quickstart":
        env["HOOKD_PROCESSORS"] = "1"
        with HookdServer(env, tmp_path) as server:
            yield Deployment(db_url, server)
        return
    with RedisServer(tmp_path) as redis:
        env["HOOKD_REDIS_URL"] = redis.url
        with HookdServer(env, tmp_path) as server, HookdWorker(env, tmp_path) as worker:
            worker.wait_started()
            yield Deployment(db_url, server)


@pytest.fixture(params=["quickstart", "worker"])
def deployment_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_for(deployment_kind: str, request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if deployment_kind == "quickstart" else "pg_url"
    url: str = request.getfixturevalue(name)
    return url


async def first(url: str, sql: str) -> object:
    async with engine_of(url) as engine, engine.connect() as conn:
        return (await conn.execute(sa.text(sql))).scalar()


async def alert_status(url: str, kind: str) -> object:
    return await first(url, f"SELECT status FROM alerts WHERE kind = '{kind}' ORDER BY id DESC")


async def until(url: str, kind: str, status: str, timeout_s: float = 30.0) -> None:
    async def there() -> bool:
        return await alert_status(url, kind) == status

    await wait_for(
        there,
        timeout_s=timeout_s,
        interval_s=0.2,
        message=lambda: f"alert {kind} never {status}",
    )


async def messages(sink: Sink, path: str, count: int, timeout_s: float = 30.0) -> None:
    await wait_for(
        lambda: len(sink.at(path)) >= count,
        timeout_s=timeout_s,
        interval_s=0.1,
        message=lambda: f"{path} got {len(sink.at(path))} messages, not {count}",
    )


async def set_broken(url: str, broken: bool) -> None:
    async with engine_of(url) as engine, engine.begin() as conn:
        await conn.execute(sa.text("DELETE FROM switches WHERE name = 'broken'"))
        await conn.execute(
            sa.text("INSERT INTO switches (name, value) VALUES ('broken', :v)"), {"v": int(broken)}
        )


async def test_a_handler_failing_until_fixed_opens_then_resolves_the_dead_alert(
    deployment_kind: str, db_for: str, tmp_path: Path
) -> None:
    await handlers.prepare(db_for)
    await set_broken(db_for, True)
    async with notify_sink() as sink:
        config = sources_file(tmp_path, sink)
        with deployed(deployment_kind, db_for, tmp_path, config) as hookd:
            async with httpx.AsyncClient(base_url=hookd.server.url, timeout=10) as client:
                for key in ("d-1", "d-2"):
                    headers, body = github(key)
                    response = await client.post("/hooks/github", content=body, headers=headers)
                    assert response.status_code == 202
                await until(db_for, "dead", "open")
                for path in ("/slack", "/pagerduty", "/webhook"):
                    await messages(sink, path, 1)
                # The fix, then the replay of what went dead: the alert resolves by itself.
                await set_broken(db_for, False)
                dead = await client.get("/api/events", params={"status": "dead"}, headers=AUTH)
                for event in dead.json()["events"]:
                    replayed = await client.post(f"/api/events/{event['id']}/replay", headers=AUTH)
                    assert replayed.status_code in (200, 202), replayed.text
                await until(db_for, "dead", "resolved")
                for path in ("/slack", "/pagerduty", "/webhook"):
                    await messages(sink, path, 2)
            await asyncio.sleep(2.5)  # more evaluations: nothing more is sent
    slack = [m.json() for m in sink.at("/slack")]
    assert len(slack) == 2
    assert "opened" in slack[0]["text"] and "dead" in slack[0]["text"]
    assert "resolved" in slack[1]["text"]
    pager = [m.json() for m in sink.at("/pagerduty")]
    assert [p["event_action"] for p in pager] == ["trigger", "resolve"]
    assert pager[0]["dedup_key"] == pager[1]["dedup_key"]
    hooks = [verified(m) for m in sink.at("/webhook")]
    assert [h["type"] for h in hooks] == ["hookd.alert.opened", "hookd.alert.resolved"]
    ids = {m.headers["webhook-id"] for m in sink.at("/webhook")}
    assert len(ids) == 2  # two messages, each with its own id
    # No payload in any message: only the alert's words.
    for received in sink.received:
        assert b"pad" not in received.body


async def test_a_destination_down_then_up_opens_then_resolves_breaker_open(
    deployment_kind: str, db_for: str, tmp_path: Path
) -> None:
    await handlers.prepare(db_for)
    async with notify_sink() as sink:
        sink.refuse("/dest", 503)  # the destination answers on the sink's own server
        config = sources_file(
            tmp_path,
            sink,
            handler="",
            destination=f"{sink.url}/dest",
            kinds='kinds = ["breaker_open"]',
        )
        with deployed(deployment_kind, db_for, tmp_path, config) as hookd:
            async with httpx.AsyncClient(base_url=hookd.server.url, timeout=10) as client:
                for key in ("b-1", "b-2", "b-3"):
                    headers, body = github(key)
                    response = await client.post("/hooks/github", content=body, headers=headers)
                    assert response.status_code == 202
                await until(db_for, "breaker_open", "open")
                await messages(sink, "/slack", 1)
                sink.accept("/dest")
                # The breaker's probe after its cool-down succeeds: it closes.
                await until(db_for, "breaker_open", "resolved", timeout_s=45)
                await messages(sink, "/slack", 2)
    texts = [m.json()["text"] for m in sink.at("/slack")]
    assert "opened" in texts[0] and "breaker_open" in texts[0]
    assert "resolved" in texts[1]


def hookd_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hookd.cli", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_pruning_that_falls_behind_opens_prune_behind_until_a_prune_runs(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with notify_sink() as sink:
        config = sources_file(tmp_path, sink, alerts="prune_behind_s = 2")
        env = {"HOOKD_CONFIG": str(config), "HOOKD_DATABASE_URL": sqlite_url}
        pruned = await asyncio.to_thread(hookd_cli, env, "prune")
        assert pruned.returncode == 0, pruned.stderr
        # Scheduled hourly, last done now: 2 s later it is behind what the alert allows.
        serve_env = {**env, "HOOKD_PRUNE_EVERY_S": "3600", "HOOKD_PROCESSORS": "1"}
        with HookdServer(serve_env, tmp_path):
            await until(sqlite_url, "prune_behind", "open")
            await messages(sink, "/slack", 1)
            again = await asyncio.to_thread(hookd_cli, env, "prune")
            assert again.returncode == 0, again.stderr
            await until(sqlite_url, "prune_behind", "resolved")
    assert "prune_behind" in sink.at("/slack")[0].json()["text"]


async def test_two_serves_and_a_stop_mid_send_tell_each_channel_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Two ``hookd serve`` processes on one database keep the alerts' schedule; the
    channel is slow to answer, and both are stopped while it answers the first message,
    then one is started again: every message arrived once."""
    await handlers.prepare(sqlite_url)
    await set_broken(sqlite_url, True)
    async with notify_sink() as sink:
        sink.delay_s = 1.5
        config = sources_file(tmp_path, sink)
        env = {
            "HOOKD_CONFIG": str(config),
            "HOOKD_DATABASE_URL": sqlite_url,
            "HOOKD_PROCESSORS": "1",
        }
        one, two = HookdServer(env, tmp_path), HookdServer(env, tmp_path)
        with one, two:
            headers, body = github("twice")
            async with httpx.AsyncClient(timeout=10) as client:
                response = await client.post(
                    f"{one.url}/hooks/github", content=body, headers=headers
                )
            assert response.status_code == 202
            await wait_for(lambda: sink.arrived >= 1, timeout_s=30, interval_s=0.05)
            # Mid-send: the message is on its way to a channel that has not answered.
            await asyncio.gather(asyncio.to_thread(one.stop), asyncio.to_thread(two.stop))
        with HookdServer(env, tmp_path):
            await asyncio.sleep(4)  # evaluations and sends go on; nothing is sent twice
    for path in ("/slack", "/pagerduty", "/webhook"):
        assert len(sink.at(path)) == 1, [r.path for r in sink.received]
    assert sink.arrived == 3
    assert await first(sqlite_url, "SELECT count(*) FROM alerts") == 1
    unsent = await first(sqlite_url, "SELECT count(*) FROM notifications WHERE status <> 'sent'")
    assert unsent == 0


async def test_a_failing_channel_is_visible_and_retried_until_it_takes_the_message(
    sqlite_url: str, tmp_path: Path
) -> None:
    await handlers.prepare(sqlite_url)
    await set_broken(sqlite_url, True)
    async with notify_sink() as sink:
        sink.refuse("/slack", 500)
        config = sources_file(tmp_path, sink)
        env = {
            "HOOKD_CONFIG": str(config),
            "HOOKD_DATABASE_URL": sqlite_url,
            "HOOKD_ADMIN_TOKEN": TOKEN,
        }
        with HookdServer(env, tmp_path) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
                headers, body = github("refused")
                assert (
                    await client.post("/hooks/github", content=body, headers=headers)
                ).status_code == 202
                await until(sqlite_url, "dead", "open")
                await wait_for(
                    lambda: first(
                        sqlite_url,
                        "SELECT last_error FROM notifications WHERE channel = 'ops-slack'",
                    ),
                    timeout_s=30,
                    interval_s=0.2,
                )
                text = (await client.get("/metrics", headers=AUTH)).text
                assert 'hookd_notifications_total{channel="ops-slack",result="retry"} 1.0' in text
                await login(client, TOKEN)
                page = await client.get("/admin/alerts")
                assert page.status_code == 200
                assert "ops-slack" in page.text and "answered 500" in page.text, page.text
                sink.accept("/slack")
                await messages(sink, "/slack", 1, timeout_s=30)
    error = await first(
        sqlite_url, "SELECT last_error FROM notifications WHERE channel = 'ops-slack'"
    )
    assert sink.url not in str(error)  # the reason names no URL (a Slack URL is its token)
