"""Reconciliation against what the providers' own API descriptions allow, driven by
their documented example answers, served by the emulators over real loopback HTTP
with the runs' records in real PostgreSQL.

- GitLab's example of "list project webhook events" has no ``created_at``: such an
  event is not judged by a made-up time; stored, it is accounted for, missing, the
  run says so and leaves its window a hole (and a later run checks it again).
- Square's example event has a ``created_at`` without a zone: read as UTC, it is
  stored with its ``occurred_at``.
- Paddle's schema requires none of a notification's fields: one without
  ``occurred_at`` or ``id`` is no ``KeyError``; the run goes on and says what it
  could not judge.
- GitHub's delivery may hold a null ``request.payload``: no made-up body is stored.
- Neither GitHub nor GitLab promises newest first: an answer oldest first, over
  several pages, loses nothing.
- A first run after first runs that failed starts where they set out from.
"""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.sources import Source, parse_sources
from reconcile import coverage
from reconcile.poller import Outcome, Reconciler
from reconcile.providers.base import reconciled
from store.crypto import BodyCipher
from store.intake.events import insert_events
from store.reconcile import coverage as ledger
from tests.support.constants import SECRETS
from tests.support.data import engine_of
from tests.support.emulators import GitHubEmulator
from tests.support.emulators_paddle_square_gitlab import (
    GitLabEmulator,
    PaddleEmulator,
    SquareEmulator,
)
from tests.support.http import serve_app

pytestmark = pytest.mark.anyio

DAY = 86_400.0
HOUR = 3_600.0
TOKENS = {
    "github": "provider-api-token",
    "gitlab": "glpat-emulator",
    "paddle": "pdl_sdbx_apikey_01hemulatortestkey",
    "square": "EAAAlemulatortoken",
}
WEBHOOK_SECRETS = {
    **SECRETS,
    "gitlab": "gitlab-secret-token",
    "paddle": "pdl_ntfset_01hv8x29kz0t586xy6zn1a62ny_c2lnbmluZy1rZXktZm9yLWhvb2tk",
    "square": "square-signature-key",
}
HOOK = "repos/octo/hello/hooks/42"
SQUARE_URL = "https://hookd.example/hooks/square"

# GitLab's "Get a list of project webhook events" (doc/api/project_webhooks.md), its
# example response: two logged push events, neither with created_at. Abridged where
# only the payload's bulk is left out (the fields read are as documented).
GITLAB_EXAMPLE: list[dict[str, Any]] = [
    {
        "id": 1,
        "url": "https://example.net/",
        "trigger": "push_hooks",
        "request_headers": {
            "Content-Type": "application/json",
            "User-Agent": "GitLab/17.1.0-pre",
            "Idempotency-Key": "3a427872-00df-429c-9bc9-a9475de2efe4",
            "X-Gitlab-Event": "Push Hook",
            "X-Gitlab-Webhook-UUID": "3c5c0404-c866-44bc-a5f6-452bb1bfc76e",
            "X-Gitlab-Instance": "https://gitlab.example.com",
            "X-Gitlab-Event-UUID": "9cebe914-4827-408f-b014-cfa23a47a35f",
            "X-Gitlab-Token": "[REDACTED]",
        },
        "request_data": {
            "object_kind": "push",
            "event_name": "push",
            "before": "468abc807a2b2572f43e72c743b76cee6db24025",
            "after": "f15b32277d2c55c6c595845a87109b09c913c556",
            "ref": "refs/heads/master",
            "ref_protected": True,
            "checkout_sha": "f15b32277d2c55c6c595845a87109b09c913c556",
            "message": None,
            "user_id": 1,
            "user_name": "Administrator",
            "user_username": "root",
            "user_email": None,
            "project_id": 7,
            "total_commits_count": 3,
            "push_options": {},
        },
        "response_headers": {
            "Date": "Sun, 26 May 2024 03:03:17 GMT",
            "Content-Type": "application/json; charset=utf-8",
            "Content-Length": "16",
            "Connection": "close",
            "X-Powered-By": "Express",
            "Access-Control-Allow-Origin": "*",
            "X-Pd-Status": "sent to primary",
        },
        "response_body": '{"success":true}',
        "execution_duration": 1.0906479999999874,
        "response_status": "200",
    },
]
GITLAB_EXAMPLE.append(copy.deepcopy(GITLAB_EXAMPLE[0]))
GITLAB_EXAMPLE[1]["id"] = 2
GITLAB_EXAMPLE[1]["request_headers"] |= {
    "Idempotency-Key": "7c6e0583-49f2-4dc5-a50b-4c0bcf3c1b27",
    "X-Gitlab-Webhook-UUID": "a753eedb-1d72-4549-9ca7-eac8ea8e50dd",
    "X-Gitlab-Event-UUID": "842d7c3e-3114-4396-8a95-66c084d53cb1",
}
GITLAB_EXAMPLE[1]["response_headers"]["Date"] = "Sun, 26 May 2024 03:03:19 GMT"
GITLAB_EXAMPLE[1]["execution_duration"] = 1.0716120000000728

# Square's SearchEvents response example (square/connect-api-specification, the
# ``SearchEventsResponse`` example): created_at written without a zone.
SQUARE_EXAMPLE: dict[str, Any] = {
    "created_at": "2022-04-26T10:08:40.454726",
    "data": {
        "id": "ORSEVtZAJxb37RA1EiGw",
        "object": {
            "dispute": {
                "amount_money": {"amount": 8801, "currency": "USD"},
                "brand_dispute_id": "r9rKGSBBQbywBNnWWIiGFg",
                "card_brand": "VISA",
                "created_at": "2020-02-19T21:24:53.258Z",
                "disputed_payment": {"payment_id": "fbmsaEOpoARDKxiSGH1fqPuqoqFZY"},
                "due_at": "2020-03-04T00:00:00.000Z",
                "id": "ORSEVtZAJxb37RA1EiGw",
                "location_id": "VJDQQP3CG14EY",
                "reason": "AMOUNT_DIFFERS",
                "reported_at": "2020-02-19T00:00:00.000Z",
                "state": "WON",
                "updated_at": "2020-02-19T21:34:41.851Z",
                "version": 6,
            }
        },
        "type": "dispute",
    },
    "event_id": "73ecd468-0aba-424f-b862-583d44efe7c8",
    "location_id": "VJDQQP3CG14EY",
    "merchant_id": "0HPGX5JYE6EE1",
    "type": "dispute.state.updated",
}

# GitHub's ``hook-delivery`` example (github/rest-api-description, "Get a delivery for
# a repository webhook"), its request.payload made null as the schema allows.
GITHUB_EXAMPLE: dict[str, Any] = {
    "id": 12345678,
    "guid": "0b989ba4-242f-11e5-81e1-c7b6966d2516",
    "delivered_at": "2019-06-03T00:57:16Z",
    "redelivery": False,
    "duration": 0.27,
    "status": "OK",
    "status_code": 200,
    "event": "issues",
    "action": "opened",
    "installation_id": 123,
    "repository_id": 456,
    "url": "https://www.example.com",
    "throttled_at": "2019-06-03T00:57:16Z",
    "request": {
        "headers": {
            "X-GitHub-Delivery": "0b989ba4-242f-11e5-81e1-c7b6966d2516",
            "X-Hub-Signature-256": "sha256=6dcb09b5b57875f334f61aebed695e2e4193db5e",
            "Accept": "*/*",
            "X-GitHub-Hook-ID": "42",
            "User-Agent": "GitHub-Hookshot/b8c71d8",
            "X-GitHub-Event": "issues",
            "X-GitHub-Hook-Installation-Target-ID": "123",
            "X-GitHub-Hook-Installation-Target-Type": "repository",
            "content-type": "application/json",
            "X-Hub-Signature": "sha1=a84d88e7554fc1fa21bcbc4efae3c782a70d2b9d",
        },
        "payload": None,
    },
    "response": {
        "headers": {"Content-Type": "text/html;charset=utf-8"},
        "payload": "ok",
    },
}


def iso_z(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Clock:
    """The runs' clock: a fixed time while set, the real one otherwise."""

    def __init__(self) -> None:
        self.at: float | None = None

    def __call__(self) -> datetime:
        return datetime.fromtimestamp(time.time() if self.at is None else self.at, UTC)


@dataclass
class Setup:
    source: Source
    engine: AsyncEngine
    reconciler: Reconciler
    clock: Clock

    async def run(self) -> Outcome:
        return await self.reconciler.run(self.source)

    async def rows(self, sql: str) -> list[Any]:
        async with self.engine.connect() as conn:
            return list(await conn.execute(sa.text(sql), {"source": self.source.name}))

    async def ledger(self) -> list[tuple[str, datetime, datetime, str | None]]:
        found = await self.rows(
            "SELECT outcome, start_at, end_at, reason FROM reconcile_coverage "
            "WHERE source = :source ORDER BY recorded_at, id"
        )
        return [(r[0], r[1], r[2], r[3]) for r in found]

    async def coverage(self, since: datetime, until: datetime) -> coverage.Report:
        """What ``hookd coverage`` says of ``[since, until)``, now."""
        async with self.engine.connect() as conn:
            rows = await ledger.records(conn, self.source.name, since, until)
        situation = coverage.Situation(
            now=time.time(),
            settle_s=coverage.settle_s(self.source),
            retention_s=coverage.retention_s(self.source),
            cursor=await self.cursor(),
        )
        return coverage.merge(
            self.source.name, rows, since.timestamp(), until.timestamp(), situation
        )

    async def keys(self) -> set[str]:
        found = await self.rows("SELECT dedupe_key FROM events WHERE source = :source")
        return {r[0] for r in found}

    async def cursor(self) -> float | None:
        found = await self.rows("SELECT cursor FROM reconcile_state WHERE source = :source")
        return None if not found or found[0][0] is None else float(found[0][0])

    async def store(self, key: str) -> None:
        """An event as the receiver would have stored it, under ``key``."""
        event = reconciled(
            source=self.source.name,
            provider=self.source.provider,
            key=key,
            type_=None,
            occurred=None,
            headers={"content-type": "application/json"},
            body=b"{}",
            how="test:received",
            received_at=datetime.now(UTC),
        )
        async with self.engine.begin() as conn:
            await insert_events(conn, [event], BodyCipher(""))


Make = Callable[..., AsyncIterator[Setup]]


@pytest.fixture
def reconciling(tmp_path: Path, pg_url: str) -> Make:
    @asynccontextmanager
    async def make(provider: str, emulator: Any, extra: str = "") -> AsyncIterator[Setup]:
        head, specific = "", ""
        if provider == "github":
            specific = f'hook = "{HOOK}"'
        elif provider == "gitlab":
            specific = f'project = "{emulator.project}"\nhook_id = {emulator.hook_id}'
        elif provider == "paddle":
            specific = f'notification_setting_id = "{emulator.setting_id}"'
        else:
            head = f'public_url = "{SQUARE_URL}"'
        async with serve_app(emulator.app) as api_url:
            path = tmp_path / "hookd.toml"
            path.write_text(
                f"""
[[sources]]
name = "{provider}"
provider = "{provider}"
secrets = ["{WEBHOOK_SECRETS[provider]}"]
{head}

[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true
token = "{TOKENS[provider]}"
lookback_s = 86400
overlap_s = 60
{specific}
{extra}
"""
            )
            source = parse_sources(path.read_text(), path, env={}).get(provider)
            assert source is not None
            clock = Clock()
            async with engine_of(pg_url) as engine, httpx.AsyncClient() as http:
                reconciler = Reconciler(engine, http, BodyCipher(""), clock=clock)
                yield Setup(source, engine, reconciler, clock)

    return make


# -- GitLab: an event logged without created_at ------------------------------------


async def test_gitlab_documented_events_without_created_at_leave_a_hole_until_judged(
    reconciling: Make,
) -> None:
    gitlab = GitLabEmulator(TOKENS["gitlab"])
    gitlab.logs.extend(copy.deepcopy(GITLAB_EXAMPLE))
    timed = gitlab.add_event(time.time() - 2 * HOUR)  # one GitLab did time
    documented = [e["request_headers"]["Idempotency-Key"] for e in GITLAB_EXAMPLE]
    async with reconciling("gitlab", gitlab) as setup:
        first = await setup.run()
        # Not a made-up "now" that hides them: both said, neither passed as checked.
        assert first.status == "succeeded"
        assert (first.checked, first.repaired, first.unjudged) == (1, 1, 2)
        assert await setup.keys() == {timed}  # nothing stored for what was not judged
        [(outcome, start, end, reason)] = await setup.ledger()
        assert outcome == "failed"
        assert reason is not None
        assert reason.startswith("unjudged: 2 listed items could not be judged")
        assert "GitLab logged a hook event without created_at (2)" in reason
        report = await setup.coverage(start, end)
        [hole] = report.holes
        assert (hole.start, hole.end) == (start.timestamp(), end.timestamp())
        [said] = hole.reasons
        assert said.kind == "failed"
        assert said.detail == reason
        # The cursor stays where the window starts: a later run checks it again.
        cursor = await setup.cursor()
        assert cursor == pytest.approx(start.timestamp() + 60, abs=1e-3)

        # The receiver had them after all: now they are accounted for, and the whole
        # window, the first run's included, is checked.
        for key in documented:
            await setup.store(key)
        second = await setup.run()
        assert (second.status, second.checked, second.unjudged) == ("succeeded", 3, 0)
        outcomes = await setup.ledger()
        assert [o[0] for o in outcomes] == ["failed", "complete"]
        assert outcomes[1][1] == start
        assert outcomes[1][2] >= end
        assert (await setup.coverage(start, end)).covered  # the hole is filled
        assert await setup.cursor() == pytest.approx(outcomes[1][2].timestamp(), abs=1e-3)


# -- GitHub and GitLab: oldest first, across pages ---------------------------------


async def test_github_oldest_first_over_several_pages_loses_nothing(reconciling: Make) -> None:
    github = GitHubEmulator(TOKENS["github"], hook=HOOK)
    github.oldest_first, github.max_per_page = True, 5
    now = time.time()
    github.add_events(12, start=now - 3 * DAY, step_s=60)  # before the window
    wanted = github.add_events(8, start=now - 5 * HOUR, step_s=600)
    async with reconciling("github", github) as setup:
        outcome = await setup.run()
        assert outcome.status == "succeeded"
        assert outcome.repaired == 8
        assert await setup.keys() == set(wanted)
        assert github.calls_by_path[f"/{HOOK}/deliveries"] == 4  # every page read


async def test_github_newest_first_still_stops_once_seen_past_the_window(
    reconciling: Make,
) -> None:
    github = GitHubEmulator(TOKENS["github"], hook=HOOK)
    github.max_per_page = 5
    now = time.time()
    github.add_events(20, start=now - 3 * DAY, step_s=60)
    wanted = github.add_events(3, start=now - 5 * HOUR, step_s=600)
    async with reconciling("github", github) as setup:
        outcome = await setup.run()
        assert (outcome.status, outcome.repaired) == ("succeeded", 3)
        assert await setup.keys() == set(wanted)
        # Page 1: the three and two older; page 2 wholly older, the order seen: stop.
        assert github.calls_by_path[f"/{HOOK}/deliveries"] == 2


async def test_gitlab_oldest_first_over_several_pages_loses_nothing(reconciling: Make) -> None:
    gitlab = GitLabEmulator(TOKENS["gitlab"])
    gitlab.oldest_first = True
    now = time.time()
    gitlab.add_events(30, start=now - 3 * DAY, step_s=60)  # before the window
    wanted = gitlab.add_events(15, start=now - 5 * HOUR, step_s=600)
    async with reconciling("gitlab", gitlab) as setup:
        outcome = await setup.run()
        assert (outcome.status, outcome.repaired, outcome.unjudged) == ("succeeded", 15, 0)
        assert await setup.keys() == set(wanted)
        calls = sum(n for path, n in gitlab.calls_by_path.items() if path.endswith("/events"))
        assert calls == 3  # every page read


# -- GitHub: a delivery without its payload ----------------------------------------


async def test_github_delivery_without_payload_is_not_stored_with_a_made_up_body(
    reconciling: Make,
) -> None:
    github = GitHubEmulator(TOKENS["github"], hook=HOOK)
    delivery = copy.deepcopy(GITHUB_EXAMPLE)
    delivery["delivered_at"] = iso_z(time.time() - 2 * HOUR)
    github.deliveries.append(delivery)
    kept = github.add_events(1, start=time.time() - HOUR, step_s=1)
    async with reconciling("github", github) as setup:
        outcome = await setup.run()
        assert outcome.status == "succeeded"
        assert (outcome.checked, outcome.missing, outcome.repaired) == (2, 1, 1)
        assert outcome.unjudged == 1
        assert await setup.keys() == set(kept)  # no ``null`` body under its GUID
        [(kind, _, _, reason)] = await setup.ledger()
        assert kind == "failed"
        assert reason is not None
        assert "GitHub shows delivery 12345678 without its payload" in reason
        assert 'repair = "redeliver"' in reason


# -- Square: created_at without a zone ---------------------------------------------


async def test_square_documented_created_at_without_zone_is_utc_and_stored(
    reconciling: Make,
) -> None:
    square = SquareEmulator(TOKENS["square"], SQUARE_URL)
    at = float(int(time.time() - 2 * HOUR)) + 0.454726
    event = copy.deepcopy(SQUARE_EXAMPLE)
    # The example's own form, moved into the window: no zone.
    event["created_at"] = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    square.add_listed(event)
    async with reconciling("square", square) as setup:
        outcome = await setup.run()
        assert (outcome.status, outcome.repaired) == ("succeeded", 1)
        [(occurred, type_)] = await setup.rows(
            "SELECT occurred_at, type FROM events WHERE source = :source"
        )
        assert type_ == "dispute.state.updated"
        assert occurred is not None
        assert occurred.timestamp() == pytest.approx(at, abs=1e-3)


# -- Paddle: notifications without occurred_at or id -------------------------------


async def test_paddle_notifications_without_occurred_at_or_id_are_said_not_a_crash(
    reconciling: Make,
) -> None:
    paddle = PaddleEmulator(TOKENS["paddle"])
    now = time.time()
    [timed] = paddle.add_events(1, now - 3 * HOUR, 60, type="customer.created")
    [by_payload, timeless] = paddle.add_events(2, now - 2 * HOUR, 60, type="customer.created")
    for n in paddle.notifications:
        event_id = n["payload"]["event_id"]
        if event_id == by_payload:
            del n["occurred_at"]  # its payload's occurred_at still says when
        elif event_id == timeless:
            del n["occurred_at"], n["payload"]["occurred_at"], n["id"]
    async with reconciling("paddle", paddle) as setup:
        for _ in range(2):  # not once only: every run goes on
            outcome = await setup.run()
            assert outcome.status == "succeeded", outcome.error
            assert outcome.unjudged == 1
        assert await setup.keys() == {timed, by_payload}
        reasons = [r[3] for r in await setup.ledger()]
        assert len(reasons) == 2
        assert all(
            r is not None and "Paddle listed a notification without occurred_at (1)" in r
            for r in reasons
        )


# -- A first run after failed first runs -------------------------------------------


async def test_first_run_after_failed_first_runs_starts_where_they_set_out(
    reconciling: Make,
) -> None:
    github = GitHubEmulator(TOKENS["github"], hook=HOOK)
    now = float(int(time.time()))
    t0 = now - 6 * HOUR
    # In the sliver between the failed run's start and the next one's own look-back.
    [sliver] = github.add_events(1, start=t0 - DAY + 2 * HOUR, step_s=1)
    github.token = "revoked"
    async with reconciling("github", github) as setup:
        setup.clock.at = t0
        failed = await setup.run()
        assert failed.status == "failed"
        [(kind, start, _, _)] = await setup.ledger()
        assert kind == "failed"
        assert start.timestamp() == pytest.approx(t0 - DAY - 60)

        github.token = TOKENS["github"]
        setup.clock.at = now
        outcome = await setup.run()
        assert (outcome.status, outcome.repaired) == ("succeeded", 1)
        assert await setup.keys() == {sliver}
        checked = (await setup.ledger())[-1]
        assert checked[0] == "repaired"
        assert checked[1] == start  # no sliver between them left unchecked
