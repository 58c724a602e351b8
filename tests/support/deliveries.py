"""Signed GitHub deliveries: made (``github``, ``github_requests``), posted to a real
``hookd serve`` one batch or many at a time (``post_batch``, ``send``), and what came of
them (``wait_processed``, ``stored_keys``): the end-to-end tests' load."""

from __future__ import annotations

import asyncio
import json
import random
import time

import httpx
import sqlalchemy as sa

from hookd.providers.github import github_headers
from hookd.providers.signing import sample_event
from store.models import EVENTS
from tests.support.constants import SECRETS
from tests.support.data import engine_of, scalar
from tests.support.waiting import wait_for

Request = tuple[dict[str, str], bytes]


async def send(base_url: str, requests: list[Request], concurrency: int = 32) -> list[int]:
    queue = list(requests)
    statuses: list[int] = []

    async def sender(client: httpx.AsyncClient) -> None:
        while queue:
            headers, body = queue.pop()
            response = await client.post("/hooks/github", content=body, headers=headers)
            statuses.append(response.status_code)

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:
        await asyncio.gather(*(sender(client) for _ in range(concurrency)))
    return statuses


async def wait_processed(url: str, expected: int, timeout_s: float = 90) -> float:
    """Seconds until ``expected`` events are processed; fails after ``timeout_s``."""

    async def done() -> bool:
        processed = "SELECT count(*) FROM events WHERE status = 'processed'"
        return await scalar(url, processed) >= expected

    async def unprocessed() -> str:
        states = await scalar(url, "SELECT count(*) FROM events WHERE status <> 'processed'")
        return f"{states} events not processed after {timeout_s}s"

    started = time.monotonic()
    await wait_for(done, timeout_s=timeout_s, interval_s=0.2, message=unprocessed)
    return time.monotonic() - started


def github_requests(count: int, duplicates: int) -> list[Request]:
    unique = [sample_event("github", SECRETS["github"], i) for i in range(count)]
    mixed = unique + random.sample(unique, duplicates)
    random.shuffle(mixed)
    return mixed


async def post_batch(url: str, first: int, count: int) -> list[str]:
    """``count`` signed GitHub deliveries; their event ids, every one accepted."""
    ids: list[str] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for seq in range(first, first + count):
            headers, body = sample_event("github", SECRETS["github"], seq)
            response = await client.post("/hooks/github", content=body, headers=headers)
            assert response.status_code == 202, response.text
            ids.append(response.json()["event_id"])
    return ids


async def stored_keys(url: str) -> list[str]:
    async with engine_of(url) as engine, engine.connect() as conn:
        rows = await conn.execute(sa.select(EVENTS.c.dedupe_key).order_by(EVENTS.c.id))
        return [key for (key,) in rows]


def github(key: str, size: int = 0) -> tuple[dict[str, str], bytes]:
    body = json.dumps({"action": "opened", "pad": "x" * size}).encode()
    return github_headers(SECRETS["github"], body, "issues", key), body
