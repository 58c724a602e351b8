"""Signed GitHub deliveries posted to a real ``hookd serve`` many at a time, and the wait
until they are processed: the end-to-end tests' load."""

from __future__ import annotations

import asyncio
import random
import time

import httpx

from hookd.providers.signing import sample_event
from tests.support.constants import SECRETS
from tests.support.data import scalar
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
