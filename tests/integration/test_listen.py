"""``hookd listen`` against a real ``hookd serve``: every event of a burst reaches a local
app once, in storage (id) order, across a restart of the server; the app verifies each
with Stripe's own SDK (``stripe.Webhook.construct_event``) and the provider's secret.
``--resign`` is verified with the ``standardwebhooks`` package, ``--last N`` sends the
newest N first, and the stream takes the listen token (or the admin token) only.

Real processes on loopback: ``hookd serve``, ``hookd listen``, a uvicorn app.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import standardwebhooks
import stripe
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.constants import STRIPE_SECRET
from tests.support.http import serve_app
from tests.support.server import ROOT, HookdProcess, HookdServer
from tests.support.stripe_source import stripe_source, webhook
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio

ADMIN, READ, LISTEN = "listen-test-admin", "listen-test-read", "listen-test-listen"
RESIGN_SECRET = "whsec_" + base64.b64encode(b"a local secret of 32 bytes, ok!!").decode()


@dataclass
class LocalApp:
    """The app on this machine: it verifies each request as its own code would, and
    records what it accepted (the Stripe event ids, in arrival order) and refused."""

    verify: Callable[[bytes, dict[str, str]], str]
    accepted: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    async def endpoint(self, request: Request) -> Response:
        body = await request.body()
        try:
            event_id = self.verify(body, dict(request.headers))
        except Exception as exc:  # whatever the SDK raises: a refusal, as the app would
            self.refused.append(type(exc).__name__)
            return Response(status_code=400)
        self.accepted.append(event_id)
        return Response(status_code=200)


def stripe_verified(body: bytes, headers: dict[str, str]) -> str:
    event = stripe.Webhook.construct_event(body, headers["stripe-signature"], STRIPE_SECRET)
    return str(event["id"])


def standard_verified(body: bytes, headers: dict[str, str]) -> str:
    standardwebhooks.Webhook(RESIGN_SECRET).verify(body, headers)
    return str(json.loads(body)["id"])


@asynccontextmanager
async def local_app(
    verify: Callable[[bytes, dict[str, str]], str],
) -> AsyncIterator[tuple[str, LocalApp]]:
    app = LocalApp(verify)
    starlette = Starlette(routes=[Route("/hooks", app.endpoint, methods=["POST"])])
    async with serve_app(starlette) as url:
        yield f"{url}/hooks", app


def env_for(tmp_path: Path, db_url: str, **extra: str) -> dict[str, str]:
    config = tmp_path / "hookd.toml"
    config.write_text(stripe_source(handler=False))
    return {
        "HOOKD_CONFIG": str(config),
        "HOOKD_DATABASE_URL": db_url,
        "HOOKD_ADMIN_TOKEN": ADMIN,
        "HOOKD_READ_TOKEN": READ,
        "HOOKD_LISTEN_TOKEN": LISTEN,
        "HOOKD_PRUNE_EVERY_S": "0",
        "HOOKD_RECONCILE_SCHEDULE": "false",
        **extra,
    }


def stripe_event(n: int, type_: str = "invoice.paid") -> dict[str, Any]:
    return {
        "id": f"evt_listen_{n:04d}",
        "object": "event",
        "type": type_,
        "created": 1_700_000_000 + n,
        "data": {"object": {"id": f"in_{n}", "object": "invoice"}},
    }


async def deliver_all(url: str, events: list[dict[str, Any]], concurrency: int = 16) -> None:
    """Each event signed and POSTed, ``concurrency`` at once; each must be stored (202)."""
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:

        async def one(event: dict[str, Any]) -> None:
            body, headers = webhook(event)
            async with gate:
                response = await client.post("/hooks/stripe", content=body, headers=headers)
            assert response.status_code == 202, response.text

        await asyncio.gather(*(one(e) for e in events))


async def hookd_ids_by_stripe_id(url: str) -> dict[str, str]:
    """Stripe event id (the dedupe key) → hookd event id, from the API."""
    found: dict[str, str] = {}
    cursor = ""
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        while True:
            params = {"source": "stripe", "limit": "500", **({"cursor": cursor} if cursor else {})}
            page = await client.get("/api/events", params=params, headers=bearer(ADMIN))
            assert page.status_code == 200, page.text
            data = page.json()
            found |= {e["dedupe_key"]: e["id"] for e in data["events"]}
            cursor = data["next_cursor"]
            if not cursor:
                return found


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def listen(
    server: HookdServer, to: str, env: dict[str, str], *options: str
) -> Iterator[HookdProcess]:
    """``hookd listen`` running, stopped after the block (its log shown if it failed)."""
    process = HookdProcess(
        ["listen", "--from", server.url, "--to", to, *options],
        {"HOOKD_LISTEN_TOKEN": LISTEN, "HOOKD_ADMIN_TOKEN": "", **env},
        server.cwd,
    )
    process.launch()
    try:
        yield process
    except BaseException as exc:
        process.__exit__(type(exc))
        raise
    process.stop()


def stop_with_ctrl_c(process: HookdProcess) -> int:
    assert process.proc is not None
    process.proc.send_signal(signal.SIGINT)
    return process.proc.wait(timeout=15)


async def test_every_event_of_a_burst_arrives_once_in_storage_order_across_a_restart(
    tmp_path: Path, db_url: str
) -> None:
    env = env_for(tmp_path, db_url)
    events = [stripe_event(n) for n in range(200)]
    async with local_app(stripe_verified) as (to, app):
        server = HookdServer(env, tmp_path).start()
        try:
            with listen(server, to, {}) as listener:
                await asyncio.to_thread(listener.wait_for_line, lambda line: "listening to" in line)
                # The first half, concurrently; once part of it has arrived, the server
                # restarts under the open stream (SIGTERM: its stop cuts the stream).
                first = asyncio.create_task(deliver_all(server.url, events[:100]))
                await wait_for(lambda: len(app.accepted) >= 20, timeout_s=60)
                await first
                server.stop()
                assert server.exited_by_itself(), "the open stream held serve's stop"
                assert len(app.accepted) < 100, "the stream was not cut mid-burst"
                server.start()
                await asyncio.to_thread(
                    listener.wait_for_line, lambda line: "resuming after" in line, 60
                )
                await deliver_all(server.url, events[100:])
                await wait_for(
                    lambda: len(app.accepted) >= 200,
                    timeout_s=60,
                    message=lambda: (len(app.accepted), listener.log()),
                )
                # Nothing more comes (a repeat would come within the look-back).
                await asyncio.sleep(3)
                assert stop_with_ctrl_c(listener) == 0
                log = listener.log_path.read_text()
            ids = await hookd_ids_by_stripe_id(server.url)
        finally:
            server.stop()
    assert app.refused == [], "every forwarded request passes Stripe's own check"
    assert sorted(app.accepted) == sorted(e["id"] for e in events), "each event exactly once"
    arrived = [ids[stripe_id] for stripe_id in app.accepted]
    assert arrived == sorted(arrived), "in storage (id) order"
    assert "disconnected" in log and "listen stopped" in log
    lines = [line for line in log.splitlines() if " -> 200 " in line]
    assert len(lines) == 200 and all(" stripe  invoice.paid  -> 200 " in line for line in lines)


async def test_resign_and_last_send_the_newest_matching_events_signed_locally(
    tmp_path: Path, sqlite_url: str
) -> None:
    env = env_for(tmp_path, sqlite_url)
    # Seven stored before listening: invoices and a refund between them.
    stored = [
        stripe_event(n, "charge.refunded" if n % 3 == 1 else "invoice.paid") for n in range(7)
    ]
    async with local_app(standard_verified) as (to, app):
        with HookdServer(env, tmp_path) as server:
            for event in stored:  # one at a time: storage order is this order
                await deliver_all(server.url, [event], concurrency=1)
            with listen(
                server,
                to,
                {"HOOKD_LISTEN_RESIGN_SECRET": RESIGN_SECRET},
                "--resign",
                "--last",
                "3",
                "--type",
                "invoice.*",
                "--source",
                "stripe",
            ) as listener:
                await wait_for(lambda: len(app.accepted) >= 3, timeout_s=30)
                # A new one after the start arrives too, signed the same way.
                await deliver_all(server.url, [stripe_event(99)])
                await wait_for(lambda: len(app.accepted) >= 4, timeout_s=30)
                await asyncio.sleep(1)
                assert stop_with_ctrl_c(listener) == 0
    invoices = [e["id"] for e in stored if e["type"] == "invoice.paid"]
    assert app.refused == []
    assert app.accepted == [*invoices[-3:], "evt_listen_0099"]


def run_listen(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HOOKD_")}
    return subprocess.run(
        [sys.executable, "-m", "hookd.cli", "listen", *args],
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_the_stream_takes_the_listen_or_admin_token_and_bad_starts_are_one_line(
    tmp_path: Path, sqlite_url: str
) -> None:
    env = env_for(tmp_path, sqlite_url)
    with HookdServer(env, tmp_path) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            path = "/api/events:stream"
            assert (await client.get(path)).status_code == 401
            assert (await client.get(path, headers=bearer("wrong"))).status_code == 401
            refused = await client.get(path, headers=bearer(READ))
            assert refused.status_code == 403 and "HOOKD_LISTEN_TOKEN" in refused.text
            for token in (LISTEN, ADMIN):
                async with client.stream("GET", path, headers=bearer(token)) as opened:
                    assert opened.status_code == 200
                    assert opened.headers["content-type"].startswith("text/event-stream")
                    assert opened.headers["cache-control"] == "no-store"
                head = await client.head(path, headers=bearer(token))
                assert (head.status_code, head.content) == (200, b"")
                bad = await client.get(path, params={"after": "nope"}, headers=bearer(token))
                assert bad.status_code == 400 and bad.json()["error"] == "bad_request"
            # The listen token opens nothing else.
            for method, other in (
                ("GET", "/api/events"),
                ("GET", "/metrics"),
                ("POST", "/api/sources/stripe/disable"),
            ):
                response = await client.request(method, other, headers=bearer(LISTEN))
                assert response.status_code == 403, (other, response.text)
            assert (await client.post("/admin/login", data={"token": LISTEN})).status_code == 401

        common = ["--from", server.url, "--to", "http://127.0.0.1:9/hooks"]
        wrong = run_listen({"HOOKD_LISTEN_TOKEN": "wrong"}, *common)
        assert wrong.returncode == 1 and "does not take this token" in wrong.stderr
        read = run_listen({"HOOKD_LISTEN_TOKEN": READ}, *common)
        assert read.returncode == 1 and "HOOKD_LISTEN_TOKEN" in read.stderr
    for env_extra, args, said in (
        ({}, common, "HOOKD_LISTEN_TOKEN: not set"),
        ({"HOOKD_LISTEN_TOKEN": LISTEN}, ["--from", "ftp://x", "--to", "http://h/"], "--from"),
        ({"HOOKD_LISTEN_TOKEN": LISTEN}, [*common, "--resign"], "HOOKD_LISTEN_RESIGN_SECRET"),
        ({"HOOKD_LISTEN_TOKEN": LISTEN}, [*common, "--since", "soon"], "--since"),
    ):
        done = run_listen(env_extra, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Traceback" not in done.stderr
    # The server gone: one line, exit 1.
    gone = run_listen({"HOOKD_LISTEN_TOKEN": LISTEN}, *common)
    assert gone.returncode == 1 and "cannot reach" in gone.stderr
