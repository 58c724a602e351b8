"""What every scenario needs: a migrated database, a config, real ``hookd`` processes,
a sender that records what was acknowledged, and counts read back from the database."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import math
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from hookd.providers.signing import sample_event
from store import migrate
from tests.support import handlers, services
from tests.support.constants import SECRETS
from tests.support.data import scalar
from tests.support.server import HookdServer, HookdWorker, RedisServer, free_port

__all__ = [
    "SECRETS",
    "Delivery",
    "HookdServer",
    "HookdWorker",
    "RedisServer",
    "Result",
    "config",
    "count",
    "deliveries",
    "free_port",
    "pg_database",
    "prepare_handlers",
    "send",
    "wait_until",
]

PROVIDERS = ("github", "stripe", "slack", "standard")
T = TypeVar("T")


@dataclass(frozen=True)
class Delivery:
    """One signed request for ``/hooks/{source}`` (source name = provider name)."""

    source: str
    headers: dict[str, str]
    body: bytes


def deliveries(provider: str, count: int, start: int = 0) -> list[Delivery]:
    """``count`` distinct, correctly signed events of one provider."""
    secret = SECRETS[provider]
    return [Delivery(provider, *sample_event(provider, secret, start + i)) for i in range(count)]


@dataclass
class Result:
    """What one request got: its status, latency and, when acknowledged, the event id."""

    delivery: Delivery
    status: int  # 0: the connection failed before an answer
    latency_s: float
    event_id: str | None = None
    error: str | None = None


async def send(
    base_url: str,
    items: Sequence[Delivery],
    *,
    concurrency: int = 32,
    timeout_s: float = 30.0,
    retry_until_s: float = 0.0,
    stop: asyncio.Event | None = None,
) -> list[Result]:
    """POST each delivery once (or, with ``retry_until_s``, again after a 5xx or a connection
    error, as a provider would, until that deadline). Returns one result per attempt that
    counts: the last one for each delivery. A ``stop`` event ends sending early."""
    queue = list(reversed(items))
    results: list[Result] = []
    deadline = time.monotonic() + retry_until_s

    async def one(client: httpx.AsyncClient, item: Delivery) -> Result:
        started = time.perf_counter()
        try:
            response = await client.post(
                f"/hooks/{item.source}", content=item.body, headers=item.headers
            )
        except httpx.HTTPError as exc:
            return Result(item, 0, time.perf_counter() - started, error=type(exc).__name__)
        elapsed = time.perf_counter() - started
        event_id = None
        if response.status_code in (200, 202):
            event_id = json.loads(response.content)["event_id"]
        return Result(item, response.status_code, elapsed, event_id)

    async def sender(client: httpx.AsyncClient) -> None:
        while queue and not (stop is not None and stop.is_set()):
            item = queue.pop()
            result = await one(client, item)
            while (result.status == 0 or result.status >= 500) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                result = await one(client, item)
            results.append(result)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout_s) as client:
        await asyncio.gather(*(sender(client) for _ in range(concurrency)))
    return results


def config(
    workdir: Path,
    *,
    handler: str | None = "effect_strict",
    providers: Sequence[str] = PROVIDERS,
    max_attempts: int = 25,
    extra: str = "",
) -> Path:
    """A hookd.toml with one source per provider, named after it, running ``handler`` from
    ``tests.support.handlers`` (effects and calls land in the hookd database)."""
    blocks = []
    for provider in providers:
        lines = [
            "[[sources]]",
            f'name = "{provider}"',
            f'provider = "{provider}"',
            f'secrets = ["{SECRETS[provider]}"]',
            f"max_attempts = {max_attempts}",
        ]
        if handler:
            lines.append(f'handlers = ["tests.support.handlers:{handler}"]')
        blocks.append("\n".join(lines) + "\n" + extra)
    path = workdir / "hookd.toml"
    path.write_text("\n\n".join(blocks))
    return path


async def prepare_handlers(url: str) -> None:
    """Create the ``effects``/``calls``/``switches`` tables the test handlers write."""
    from store import db

    engine = db.create_engine(url)
    try:
        await handlers.create_tables(engine)
    finally:
        await engine.dispose()


@contextlib.contextmanager
def pg_database() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database on the shared server; dropped afterwards.
    Usable inside a running event loop: the setup runs ``asyncio.run`` in a thread."""
    name = _in_thread(services.create_database)
    url = services.sqlalchemy_url(name)
    try:
        _in_thread(migrate.upgrade, url)
        yield url
    finally:
        _in_thread(services.drop_database, name)


def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Call ``fn`` in a fresh thread (it may call ``asyncio.run``) and wait for it."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn, *args).result()


async def count(url: str, sql: str) -> int:
    return await scalar(url, sql)


async def wait_until(
    url: str, sql: str, expected: int, timeout_s: float = 120.0, poll_s: float = 0.2
) -> float:
    """Seconds until ``sql`` (one integer) reaches ``expected``; AssertionError on timeout."""
    started = time.monotonic()
    value = -1
    while time.monotonic() - started < timeout_s:
        value = await scalar(url, sql)
        if value >= expected:
            return time.monotonic() - started
        await asyncio.sleep(poll_s)
    raise AssertionError(f"{sql!r} reached {value}, not {expected}, in {timeout_s}s")


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


@dataclass
class Workdir:
    """A scratch directory for logs and configs, kept when ``CHAOS_KEEP`` is set."""

    path: Path
    notes: list[str] = field(default_factory=list)


@contextlib.asynccontextmanager
async def workdir(base: Path | None = None) -> AsyncIterator[Path]:
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="hookd-chaos-", dir=base))
    try:
        yield path
    finally:
        if not os.environ.get("CHAOS_KEEP"):
            shutil.rmtree(path, ignore_errors=True)


def dump(figures: dict[str, Any]) -> str:
    return json.dumps(figures, indent=2, sort_keys=True, default=str)


def main(module_name: str) -> None:
    """``python -m chaos.NAME [--quick] [--set key=value ...]``: run one scenario, print its
    figures as JSON, exit 1 if any of its checks failed."""
    import argparse
    import importlib
    import sys

    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"python -m {module_name}", description=module.TITLE)
    parser.add_argument("--quick", action="store_true", help="the small counts CI uses")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one argument of run() (VALUE is read as JSON, else as a string)",
    )
    args = parser.parse_args()
    kwargs: dict[str, Any] = dict(module.QUICK if args.quick else module.FULL)
    for item in args.set:
        key, _, raw = item.partition("=")
        try:
            kwargs[key] = json.loads(raw)
        except json.JSONDecodeError:
            kwargs[key] = raw
    figures = asyncio.run(module.run(**kwargs))
    print(dump(figures))
    sys.exit(0 if all(figures.get("checks", {}).values()) else 1)
