"""``[sources.forward]``: the destination named ``forward``, delivered by the processor
on real PostgreSQL to a real HTTP target on loopback: what it sends and signs, and what
each answer does to the event."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookd.event import idempotency_key
from hookd.providers import PROVIDERS
from store.delivery import destinations as state
from store.intake.events import NewEvent
from store.models import EVENTS
from tests.support.destinations import Destination, whsec
from tests.support.http import serve_app
from tests.support.in_process import parse, processors, store
from tests.support.services import ONLY_POSTGRES

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, ONLY_POSTGRES]
SECRET = whsec("forward")
BODY = b'{"ok": true}'


def sources_toml(url: str, timeout_s: float = 10.0) -> str:
    return f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["s"]
max_attempts = 3

[sources.forward]
url = "{url}"
allow_insecure = true
secret = "{SECRET}"
timeout_s = {timeout_s}
"""


@pytest.fixture
async def target() -> AsyncIterator[tuple[Destination, str]]:
    """A target that verifies the signature of what it is sent (``unsigned`` if not)."""
    t = Destination(SECRET)
    app = Starlette(routes=[Route("/in", t.endpoint, methods=["POST"])])
    async with serve_app(app) as url:
        yield t, url + "/in"


async def forward_once(engine: AsyncEngine, toml: str) -> tuple[str, Any, dict[str, str | None]]:
    """One push event, one processing pass: (its id, its row, its ledger)."""
    [event_id] = await store(
        engine,
        [
            NewEvent(
                source="github",
                provider="github",
                dedupe_key="d-1",
                type="push",
                origin="webhook",
                received_at=datetime.now(UTC),
                occurred_at=None,
                verified_with="github-sha256;key=0",
                headers={},
                body=BODY,
            )
        ],
    )
    async with httpx.AsyncClient() as client:
        [proc] = processors(engine, parse(toml), client, count=1)
        assert await proc.run_once() == 1
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(
                    EVENTS.c.status,
                    EVENTS.c.attempts,
                    EVENTS.c.last_error,
                    EVENTS.c.last_error_handler,
                    EVENTS.c.last_error_type,
                ).where(EVENTS.c.id == event_id)
            )
        ).one()
        ledger = await state.ledger_of(conn, event_id)
    return event_id, row, ledger


async def test_forward_posts_the_body_signed_with_standard_webhooks(
    engine: AsyncEngine, target: tuple[Destination, str]
) -> None:
    t, url = target
    event_id, row, ledger = await forward_once(engine, sources_toml(url))
    assert not t.unsigned
    [delivery] = t.accepted
    assert delivery.body == BODY  # the original body, as received
    assert delivery.headers["webhook-id"] == event_id
    assert delivery.headers["idempotency-key"] == idempotency_key(event_id, "forward")
    assert delivery.headers["x-hookd-source"] == "github"
    assert delivery.headers["x-hookd-event-type"] == "push"
    standard = PROVIDERS["standard"]
    verified = standard.verify_request(
        {k: [v] for k, v in delivery.headers.items()},
        delivery.body,
        [standard.parse_secret(SECRET)],
        int(time.time()),
        300,
    )
    assert verified.scheme == "standard-v1"
    assert (row.status, row.attempts, row.last_error) == ("processed", 1, None)
    assert ledger == {"forward": None}  # delivered: never again for this event


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_forward_retries_on_server_errors_and_throttling(
    engine: AsyncEngine, target: tuple[Destination, str], status: int
) -> None:
    t, url = target
    t.status = status
    event_id, row, ledger = await forward_once(engine, sources_toml(url))
    assert [d.event_id for d in t.refused] == [event_id] and not t.unsigned
    assert (row.status, row.attempts) == ("retrying", 1)
    assert row.last_error == f"forward: RuntimeError: destination answered {status}"
    assert (row.last_error_handler, row.last_error_type) == ("forward", "RuntimeError")
    assert ledger == {}


@pytest.mark.parametrize("status", [400, 404, 410])
async def test_forward_gives_up_on_client_errors(
    engine: AsyncEngine, target: tuple[Destination, str], status: int
) -> None:
    t, url = target
    t.status = status
    event_id, row, ledger = await forward_once(engine, sources_toml(url))
    assert [d.event_id for d in t.refused] == [event_id]
    # Dead at once, with the reason [sources.forward] always had.
    assert (row.status, row.attempts) == ("dead", 1)
    assert row.last_error == f"forward: forward_rejected: destination answered {status}"
    assert (row.last_error_handler, row.last_error_type) == ("forward", "PermanentError")
    assert ledger == {}


async def test_forward_timeout_is_a_retryable_failure(engine: AsyncEngine) -> None:
    async def slow(_: Request) -> Response:
        await asyncio.sleep(1)
        return Response()

    app = Starlette(routes=[Route("/in", slow, methods=["POST"])])
    async with serve_app(app) as url:
        _, row, ledger = await forward_once(engine, sources_toml(url + "/in", timeout_s=0.2))
    assert (row.status, row.attempts) == ("retrying", 1)
    assert row.last_error == "forward: ReadTimeout: did not answer within 0.2s"
    assert (row.last_error_handler, row.last_error_type) == ("forward", "ReadTimeout")
    assert ledger == {}
