"""Reconciliation runs started every half second while webhooks are being delivered:
what the settle window is for. Shared by ``tests/integration/test_settle_window.py``
(a few hundred events per provider) and ``bench/settle.py`` (thousands).

Each event appears in the emulated provider API's list at its time, and its webhook
is delivered a little after that, except for the dropped ones (a tenth). A third of
those are delivered after all, once a run has stored them: late deliveries (a
provider's retry). A run that judged an event whose webhook was still on its way
would count a miss too many and store the event first; with a settle window longer
than the delivery delay, none does.

That premise is the plan's (webhooks up to ``max_delay_s`` late, ``settle_s`` longer),
but on a loaded machine a delivery can take longer than planned: its event loop, the
receiver and the database all share the cores. With ``hold_clock`` the runs' clock (the
one their settle window is reckoned from) does not pass a delivery still under way by
more than the settle window: a run that starts then is given the latest time at which
that webhook would still be on time. However slow the machine, the provider's delays
stay within the settle window, as the plan says, and the runs still judge while other
webhooks are in flight (``runs_in_flight`` counts them). The bench leaves it off: it
reports what the real clock gives, ``--contrast`` included.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.sources import Source, parse_sources
from reconcile.poller import Outcome as RunOutcome
from reconcile.poller import Reconciler
from store import db
from store.crypto import BodyCipher
from store.status import RunStatus
from tests.support import handlers
from tests.support.asgi import running_app
from tests.support.constants import SECRETS
from tests.support.emulators import GitHubEmulator, SlackEmulator, StripeEmulator
from tests.support.http import serve_app

TOKEN = "settle-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
API_TOKEN = "provider-api-token"
STRIPE_KEY = "sk_test_hookd"
HOOK = "repos/octo/hello/hooks/42"
CHANNELS = ("C0HOOKD", "C1HOOKD")

Emulator = GitHubEmulator | StripeEmulator | SlackEmulator


@dataclass(frozen=True, slots=True)
class Plan:
    provider: str
    count: int
    # Events are spread over this many seconds, starting shortly after the scenario.
    span_s: float = 3.0
    settle_s: float = 4.0
    # Each delivered webhook goes out this long after its event, at most (uniform).
    max_delay_s: float = 1.0
    run_every_s: float = 0.5
    drop_share: float = 0.1
    # Of the dropped ones, how many are delivered after a run stored them.
    late_share: float = 1 / 3
    seed: int = 18
    # Hold the runs' clock back while a delivery is slower than the settle window (see
    # the module's docstring); off, the runs keep to the real clock.
    hold_clock: bool = False


@dataclass
class Outcome:
    plan: Plan
    dropped: int
    late_sent: int
    runs_started: int
    stored: int
    distinct: int
    by_reconcile: int
    missed_sum: int
    late_sum: int
    missed_metric: float
    late_metric: float
    effects: int
    calls: int
    # Deliveries whose answer came after the event's time plus the settle window (each
    # one would make a miss honest only by luck): none, if the machine kept up. With
    # hold_clock they do no harm: the runs' clock waited for them.
    slow_deliveries: int
    # Runs that started while a webhook was still to be delivered and judged (they
    # held the lease): those the settle window is for.
    runs_in_flight: int = 0
    # The most the runs' clock was held back, in seconds (0 if the machine kept up).
    held_s: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def sources_toml(plan: Plan, api_url: str) -> str:
    token = STRIPE_KEY if plan.provider == "stripe" else API_TOKEN
    specific = {
        "github": f'hook = "{HOOK}"',
        "stripe": "",
        "slack": f"channels = {list(CHANNELS)!r}\nrequests_per_minute = 10000".replace("'", '"'),
    }[plan.provider]
    return f"""
[[sources]]
name = "{plan.provider}"
provider = "{plan.provider}"
secrets = ["{SECRETS[plan.provider]}"]
handlers = ["tests.support.handlers:effect_strict"]

[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true
token = "{token}"
lookback_s = 600
overlap_s = 2
settle_s = {plan.settle_s}
{specific}
"""


def emulator_for(provider: str) -> Emulator:
    if provider == "github":
        return GitHubEmulator(API_TOKEN, hook=HOOK)
    if provider == "stripe":
        return StripeEmulator(STRIPE_KEY)
    return SlackEmulator(API_TOKEN, channels=CHANNELS)


def add_events(emulator: Emulator, count: int, start: float, step_s: float) -> list[str]:
    return emulator.add_events(count, start=start, step_s=step_s)


async def scalar(engine: AsyncEngine, sql: str, **params: object) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(sa.text(sql), params)).scalar() or 0)


async def metric(client: httpx.AsyncClient, name: str, source: str) -> float:
    text = (await client.get("/metrics", headers=AUTH)).text
    found = re.search(rf'^{name}\{{source="{source}"\}} (\S+)$', text, re.M)
    assert found, f"{name} missing from /metrics"
    return float(found.group(1))


async def until_true(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not in {timeout_s:g} s: {what}")
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def runs_every(
    reconciler: Reconciler,
    source: Source,
    every_s: float,
    in_flight: Callable[[], bool] = lambda: False,
) -> AsyncIterator[list[tuple[asyncio.Task[RunOutcome], bool]]]:
    """A run of ``source`` started every ``every_s`` (each finds the lease held while the
    one before still runs); the started tasks, each with whether a webhook was
    ``in_flight`` as it started, all awaited on the way out."""
    started: list[tuple[asyncio.Task[RunOutcome], bool]] = []

    async def starter() -> None:
        while True:
            busy = in_flight()
            task = asyncio.create_task(reconciler.run(source, trigger="schedule"))
            started.append((task, busy))
            await asyncio.sleep(every_s)

    task = asyncio.create_task(starter())
    try:
        yield started
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.gather(*(task for task, _ in started))


async def run(plan: Plan, db_url: str) -> Outcome:
    """The scenario on ``db_url`` (migrated, empty; ``HOOKD_DATABASE_URL`` names it)."""
    began = time.monotonic()
    engine = db.create_engine(db_url)
    await handlers.create_tables(engine)
    rng = random.Random(plan.seed)
    emulator = emulator_for(plan.provider)
    start = time.time() + 0.5
    step = plan.span_s / plan.count
    keys = add_events(emulator, plan.count, start, step)
    at = {key: start + i * step for i, key in enumerate(keys)}
    requests = {
        key: (body, headers)
        for key, body, headers in emulator._webhook_requests(SECRETS[plan.provider])
    }
    appear = hide_until_due(emulator)
    dropped = set(rng.sample(keys, round(plan.count * plan.drop_share)))
    late = set(rng.sample(sorted(dropped), round(len(dropped) * plan.late_share)))
    if isinstance(emulator, GitHubEmulator):  # its deliveries list says which failed
        for guid in dropped:
            for delivery in emulator.deliveries_for(guid):
                delivery["status"], delivery["status_code"] = "failed to connect", 502
    statuses: dict[str, int] = {}
    slow = 0
    # Webhooks to be delivered on time (neither dropped nor late), until answered.
    pending = {key: at[key] for key in keys if key not in dropped}
    held_s = 0.0

    def runs_clock() -> datetime:
        """The real time, or with ``hold_clock`` no later than the oldest pending
        webhook's event time plus the settle window, less the second the list's
        whole-second times take off (floor(time) in the list)."""
        nonlocal held_s
        now = time.time()
        if plan.hold_clock and pending:
            latest = min(pending.values()) + plan.settle_s - 1.0
            if latest < now:
                held_s = max(held_s, now - latest)
                now = latest
        return datetime.fromtimestamp(now, UTC)

    try:
        async with serve_app(emulator.app) as api_url:
            sources = parse_sources(sources_toml(plan, api_url), Path("settle.toml"), env={})
            source = sources.get(plan.provider)
            assert source is not None
            async with (
                running_app(
                    sources, db_url, admin_token=TOKEN, sweep_s=0.1, reconcile_schedule=False
                ) as (_, client),
                httpx.AsyncClient() as http,
            ):
                reconciler = Reconciler(engine, http, BodyCipher(""), clock=runs_clock)
                url = f"http://hookd/hooks/{plan.provider}"

                async def deliver(key: str, when: float) -> None:
                    nonlocal slow
                    await asyncio.sleep(max(0.0, when - time.time()))
                    body, headers = requests[key]
                    answer = await client.post(url, content=body, headers=headers)
                    statuses[key] = answer.status_code
                    if key not in late and time.time() > at[key] + plan.settle_s - 1.0:
                        slow += 1  # floor(time) in the list: a second less of margin
                    pending.pop(key, None)

                async def deliver_late() -> None:
                    left = set(late)
                    while left:
                        stored = await _stored_by_reconcile(engine, plan.provider, left)
                        for key in stored:
                            await deliver(key, 0.0)
                        left -= stored
                        await asyncio.sleep(0.1)

                async with runs_every(
                    reconciler, source, plan.run_every_s, lambda: bool(pending)
                ) as started:
                    await asyncio.gather(
                        appear(),
                        *(
                            deliver(key, at[key] + rng.uniform(0, plan.max_delay_s))
                            for key in keys
                            if key not in dropped
                        ),
                        deliver_late(),
                    )

                    async def all_repaired() -> bool:
                        stored = await _stored_by_reconcile(engine, plan.provider, dropped)
                        return stored == dropped

                    await until_true(all_repaired, 60, "every dropped event stored by a run")
                runs_started = len(started)
                runs_in_flight = sum(
                    1
                    for task, busy in started
                    if busy and task.result().status == RunStatus.SUCCEEDED
                )
                # One more run, after everything: it finds nothing left to repair.
                final = await reconciler.run(source, trigger="cli", wait_for_lease_s=30)
                assert (final.status, final.missing) == ("succeeded", 0), final

                async def all_processed() -> bool:
                    done = await scalar(
                        engine, "SELECT count(*) FROM events WHERE status = 'processed'"
                    )
                    return done >= plan.count

                await until_true(all_processed, 120, "every event processed")

                async def lates_written() -> bool:  # written a batch at a time, off the path
                    return await scalar(
                        engine, "SELECT coalesce(sum(items_late), 0) FROM reconcile_runs"
                    ) >= len(late)

                await until_true(lates_written, 30, "the late deliveries recorded")
                await asyncio.sleep(0.5)  # and nothing more comes
                missed_metric = await metric(client, "hookd_reconcile_missed_total", plan.provider)
                late_metric = await metric(client, "hookd_reconcile_late_total", plan.provider)
            return Outcome(
                plan=plan,
                dropped=len(dropped),
                late_sent=len(late),
                runs_started=runs_started,
                stored=await scalar(engine, "SELECT count(*) FROM events"),
                distinct=await scalar(engine, "SELECT count(DISTINCT dedupe_key) FROM events"),
                by_reconcile=await scalar(
                    engine, "SELECT count(*) FROM events WHERE origin = 'reconcile'"
                ),
                missed_sum=await scalar(
                    engine, "SELECT coalesce(sum(items_missing), 0) FROM reconcile_runs"
                ),
                late_sum=await scalar(
                    engine, "SELECT coalesce(sum(items_late), 0) FROM reconcile_runs"
                ),
                missed_metric=missed_metric,
                late_metric=late_metric,
                effects=await scalar(engine, "SELECT count(*) FROM effects"),
                calls=await scalar(engine, "SELECT count(*) FROM calls"),
                slow_deliveries=slow,
                runs_in_flight=runs_in_flight,
                held_s=held_s,
                statuses=statuses,
                seconds=time.monotonic() - began,
            )
    finally:
        await engine.dispose()


def hide_until_due(emulator: Emulator) -> Callable[[], Awaitable[None]]:
    """Take the emulator's events out of its list API, and return what puts each back
    at its time: a provider lists an event once it happened, not before. (The events
    are made first, so that their signed webhooks can be made once, in one pass.)"""
    due: list[tuple[float, Callable[[], None]]] = []
    if isinstance(emulator, GitHubEmulator):
        for d in emulator.deliveries:
            at = datetime.fromisoformat(d["delivered_at"].replace("Z", "+00:00")).timestamp()
            due.append((at, functools.partial(emulator.deliveries.append, d)))
        emulator.deliveries.clear()
    elif isinstance(emulator, StripeEmulator):
        # Put back in the order made, so that the list stays a prefix of the original
        # (the emulator finds an event by its index there).
        for e in emulator.events:
            due.append((float(e["created"]), functools.partial(emulator.events.append, e)))
        emulator.events.clear()
    else:
        for channel, messages in emulator.messages.items():
            for m in messages:
                put = functools.partial(emulator.messages[channel].append, m)
                due.append((float(m["ts"]), put))
            messages.clear()
    due.sort(key=lambda item: item[0])

    async def appear() -> None:
        for at, put in due:
            await asyncio.sleep(max(0.0, at - time.time()))
            put()

    return appear


async def _stored_by_reconcile(engine: AsyncEngine, source: str, keys: set[str]) -> set[str]:
    async with engine.connect() as conn:
        result = await conn.execute(
            sa.text("SELECT dedupe_key FROM events WHERE source = :s AND origin = 'reconcile'"),
            {"s": source},
        )
        return {row[0] for row in result} & keys
