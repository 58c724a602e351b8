"""The Paddle, Square and GitLab API emulators speak the documented shapes, over real
loopback HTTP; the providers' own SDKs (Paddle's and Square's) are the client where
there is one, and verify the webhooks the emulators sign."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from paddle_billing import Client as PaddleClient
from paddle_billing import Options as PaddleOptions
from paddle_billing.Entities.Notifications import NotificationStatus
from paddle_billing.Exceptions.ApiError import ApiError as PaddleApiError
from paddle_billing.Notifications import Secret as PaddleSecret
from paddle_billing.Notifications import Verifier as PaddleVerifier
from paddle_billing.Resources.Notifications.Operations import ListNotifications
from paddle_billing.Resources.Shared.Operations.List.OrderBy import OrderBy
from paddle_billing.Resources.Shared.Operations.List.Pager import Pager
from square import Square
from square.core.api_error import ApiError as SquareApiError
from square.utils.webhooks_helper import verify_signature

from tests.support import emulator_servers
from tests.support.emulator_servers import Clock, Target
from tests.support.emulators_paddle_square_gitlab import (
    GITLAB_LOG_FIELDS,
    PADDLE_FIELDS,
    GitLabEmulator,
    PaddleEmulator,
    SquareEmulator,
    webhook_key,
)

pytestmark = pytest.mark.anyio

PADDLE_KEY = "pdl_sdbx_apikey_01hemulatortestkey"
PADDLE_SECRET = "pdl_ntfset_01hv8x29kz0t586xy6zn1a62ny_c2lnbmluZy1rZXktZm9yLWhvb2tk"
SQUARE_TOKEN = "EAAAlemulatortoken"
SQUARE_KEY = "square-signature-key"
NOTIFICATION_URL = "https://hookd.example/hooks/square"
GITLAB_TOKEN = "glpat-emulator"
GITLAB_SECRET = "gitlab-secret-token"
DAY = 86400


anyio_backend = emulator_servers.anyio_backend
servers = emulator_servers.servers
serve = emulator_servers.serve
target = emulator_servers.recording_target(webhook_key)


@dataclass
class LocalEnvironment:
    """What Paddle's SDK reads of its environment: the base URL."""

    base_url: str


@contextlib.contextmanager
def paddle_sdk(base_url: str, key: str = PADDLE_KEY) -> Iterator[PaddleClient]:
    """Paddle's client, pointed at ``base_url``; its HTTP session closed afterwards."""
    options = PaddleOptions(environment=LocalEnvironment(base_url))
    client = PaddleClient(key, options=options, retry_count=0)
    try:
        yield client
    finally:
        client.client.close()


@dataclass
class SignedRequest:
    """What Paddle's ``Verifier`` reads of a request."""

    headers: httpx.Headers
    body: bytes


# -- Paddle --------------------------------------------------------------------------


async def test_paddle_sdk_pages_one_destination_newest_first(serve: Callable[[Any], str]) -> None:
    paddle = PaddleEmulator(PADDLE_KEY, other_every=2)
    now = time.time()
    ids = paddle.add_events(7, now - 600, 60, type="customer.created")
    base = serve(paddle.app)

    def listing() -> tuple[list[Any], list[Any]]:
        ours = ListNotifications(
            Pager(per_page=3, order_by=OrderBy.id_descending()),
            notification_setting_ids=[paddle.setting_id],
        )
        with paddle_sdk(base) as client:
            return list(client.notifications.list(ours)), list(client.notifications.list())

    ours, everything = await asyncio.to_thread(listing)
    assert [n.payload.event_id for n in ours] == ids[::-1]
    assert {n.notification_setting_id for n in ours} == {paddle.setting_id}
    assert [n.id for n in ours] == sorted((n.id for n in ours), reverse=True)
    assert all(n.origin.value == "event" and n.status.value == "not_attempted" for n in ours)
    assert ours[0].payload.notification_id == ours[0].id
    assert ours[0].payload.data.email == "customer7@example.com"  # parsed as a Customer
    # The other destination gets every second event: 7 + 3 notifications in all, in
    # the API's default order (the SDK sends none without a Pager): id[DESC].
    assert len(everything) == 10
    assert [n.id for n in everything] == sorted((n.id for n in everything), reverse=True)
    assert paddle.calls_by_path["/notifications"] == 3 + 1


async def test_paddle_list_shape_filters_and_ninety_day_retention(
    serve: Callable[[Any], str],
) -> None:
    paddle = PaddleEmulator(PADDLE_KEY, other_every=0)
    clock = Clock(time.time())
    paddle.now = clock
    old = paddle.add_event(clock.t - 91 * DAY)
    edge = paddle.add_event(clock.t - 89 * DAY)
    recent = paddle.add_events(4, clock.t - 3600, 60)
    base = serve(paddle.app)
    auth = {"Authorization": f"Bearer {PADDLE_KEY}"}
    async with httpx.AsyncClient(base_url=base, headers=auth) as client:
        default = (await client.get("/notifications")).json()
        since = (await client.get("/notifications", params={"from": "2000-01-01T00:00:00Z"})).json()
        window = (
            await client.get(
                "/notifications",
                params={
                    "from": paddle.events[recent[1]]["occurred_at"],
                    "to": paddle.events[recent[3]]["occurred_at"],
                },
            )
        ).json()
        paged = (
            await client.get(
                "/notifications",
                params={"per_page": 2, "notification_setting_id": paddle.setting_id},
            )
        ).json()
        following = await client.get(paged["meta"]["pagination"]["next"])
        huge = (await client.get("/notifications", params={"per_page": 500})).json()
        bad_status = await client.get("/notifications", params={"status": "lost"})
        bad_time = await client.get("/notifications", params={"from": "yesterday"})
        clock.t += 2 * DAY
        later = (await client.get("/notifications")).json()
    assert set(default) == {"data", "meta"}
    assert set(default["meta"]) == {"request_id", "pagination"}
    assert set(default["meta"]["pagination"]) == {"per_page", "next", "has_more", "estimated_total"}
    first = default["data"][0]
    assert tuple(first) == PADDLE_FIELDS
    assert set(first["payload"]) == {
        "data",
        "event_id",
        "event_type",
        "occurred_at",
        "notification_id",
    }
    assert re.fullmatch(r"ntf_[0-9a-z]{26}", first["id"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", first["occurred_at"])
    listed = [n["payload"]["event_id"] for n in default["data"]]
    assert listed == [*recent[::-1], edge] and old not in listed
    assert len(since["data"]) == 5
    assert [n["payload"]["event_id"] for n in window["data"]] == [recent[2], recent[1]]
    assert [n["payload"]["event_id"] for n in paged["data"]] == recent[::-1][:2]
    assert paged["meta"]["pagination"]["has_more"] is True
    assert paged["meta"]["pagination"]["estimated_total"] == 5
    assert [n["payload"]["event_id"] for n in following.json()["data"]] == recent[::-1][2:4]
    kept = parse_qs(urlsplit(paged["meta"]["pagination"]["next"]).query)
    assert kept == {
        "per_page": ["2"],
        "notification_setting_id": [paddle.setting_id],
        "after": [paged["data"][-1]["id"]],
    }
    assert huge["meta"]["pagination"]["per_page"] == 200
    assert bad_status.status_code == 400
    assert bad_status.json()["error"]["code"] == "invalid_field"
    assert bad_time.status_code == 400
    assert edge not in [n["payload"]["event_id"] for n in later["data"]]


async def test_paddle_replay_sends_a_new_notification_of_the_same_event(
    target: tuple[Target, str], serve: Callable[[Any], str]
) -> None:
    recorder, target_url = target
    paddle = PaddleEmulator(PADDLE_KEY, other_every=0)
    paddle.webhook_target = (target_url, PADDLE_SECRET)
    events = paddle.add_events(3, time.time() - 300, 10)
    async with httpx.AsyncClient() as sender:
        await paddle.send_webhooks(
            sender, target_url, PADDLE_SECRET, drop={events[0], events[1]}, dropped_status="failed"
        )
    retrying = paddle.notifications_for(events[0])[0]
    retrying["status"] = "needs_retry"
    failed = paddle.notifications_for(events[1])[0]
    base = serve(paddle.app)

    def replay() -> tuple[str, PaddleApiError, list[Any]]:
        with paddle_sdk(base) as client:
            new_id = client.notifications.replay(failed["id"])
            try:
                client.notifications.replay(retrying["id"])
            except PaddleApiError as exc:
                refused = exc
            statuses = [NotificationStatus.Failed, NotificationStatus.Delivered]
            listed = list(client.notifications.list(ListNotifications(statuses=statuses)))
        return new_id, refused, listed

    new_id, refused, listed = await asyncio.to_thread(replay)
    await paddle.drain()
    assert refused.error_code == "notification_cannot_replay"
    replayed = paddle.notification(new_id)
    assert replayed["origin"] == "replay" and replayed["payload"]["event_id"] == events[1]
    assert replayed["payload"]["notification_id"] == new_id != failed["id"]
    assert failed["replayed_at"] is not None
    assert replayed["status"] == "delivered"
    async with httpx.AsyncClient(base_url=base) as client:
        again = await client.post(
            f"/notifications/{new_id}/replay", headers={"Authorization": f"Bearer {PADDLE_KEY}"}
        )
    assert again.status_code == 400
    assert again.json()["error"]["code"] == "notification_replay_invalid_origin_type"
    # The webhooks: the third event once, the replay of the second once.
    assert recorder.keys() == collections.Counter({events[2]: 1, events[1]: 1})
    verifier = PaddleVerifier()
    for headers, body in recorder.received:
        signed = httpx.Headers(headers)
        assert verifier.verify(SignedRequest(signed, body), PaddleSecret(PADDLE_SECRET))
        assert not verifier.verify(SignedRequest(signed, body + b" "), PaddleSecret(PADDLE_SECRET))
    assert json.loads(recorder.received[-1][1])["notification_id"] == new_id
    assert {n.status.value for n in listed} <= {"failed", "delivered"}
    assert retrying["id"] not in {n.id for n in listed}


async def test_paddle_auth_and_faults(serve: Callable[[Any], str]) -> None:
    paddle = PaddleEmulator(PADDLE_KEY)
    paddle.add_events(1, time.time(), 1)
    base = serve(paddle.app)
    async with httpx.AsyncClient(base_url=base) as client:
        missing = await client.get("/notifications")
        malformed = await client.get("/notifications", headers={"Authorization": PADDLE_KEY})
        wrong = await client.get("/notifications", headers={"Authorization": "Bearer pdl_nope"})
        paddle.fail_next(429, retry_after=3)
        limited = await client.get(
            "/notifications", headers={"Authorization": f"Bearer {PADDLE_KEY}"}
        )
        paddle.fail_next(503)
        broken = await client.get(
            "/notifications", headers={"Authorization": f"Bearer {PADDLE_KEY}"}
        )
    codes = [r.json()["error"]["code"] for r in (missing, malformed, wrong)]
    assert [r.status_code for r in (missing, malformed, wrong)] == [403, 403, 403]
    assert codes == ["authentication_missing", "authentication_malformed", "forbidden"]
    assert limited.status_code == 429 and limited.headers["retry-after"] == "3"
    assert limited.json()["error"]["code"] == "too_many_requests"
    assert broken.status_code == 503 and broken.json()["error"]["type"] == "api_error"

    def sdk_with_a_wrong_key() -> PaddleApiError:
        with paddle_sdk(base, "pdl_wrong") as client:
            try:
                list(client.notifications.list())
            except PaddleApiError as exc:
                return exc
        raise AssertionError("the SDK listed with a wrong key")

    assert (await asyncio.to_thread(sdk_with_a_wrong_key)).error_code == "forbidden"


# -- Square --------------------------------------------------------------------------


async def test_square_sdk_searches_newest_first_with_a_cursor_tied_to_its_query(
    serve: Callable[[Any], str],
) -> None:
    square = SquareEmulator(SQUARE_TOKEN, NOTIFICATION_URL)
    now = time.time()
    ids = square.add_events(5, now - 900, 60)
    refunds = square.add_events(2, now - 100, 10, type="refund.created")
    base = serve(square.app)

    def search() -> tuple[list[str], list[str], int, dict[str, Any]]:
        with httpx.Client() as http:
            return searching(Square(token=SQUARE_TOKEN, base_url=base, httpx_client=http))

    def searching(client: Square) -> tuple[list[str], list[str], int, dict[str, Any]]:
        query: dict[str, Any] = {
            "filter": {"event_types": ["payment.updated"]},
            "sort": {"field": "DEFAULT", "order": "DESC"},
        }
        seen: list[str] = []
        cursor: str | None = None
        while True:
            page = client.events.search_events(limit=2, query=query, cursor=cursor)
            seen += [str(e.event_id) for e in page.events or []]
            assert [m.event_id for m in page.metadata or []] == [
                e.event_id for e in page.events or []
            ]
            cursor = page.cursor
            if not cursor:
                break
        everything = client.events.search_events(query={"sort": {"order": "ASC"}})
        first = client.events.search_events(limit=1, query=query)
        try:
            client.events.search_events(
                limit=1, query={"filter": {"event_types": ["refund.created"]}}, cursor=first.cursor
            )
        except SquareApiError as exc:
            refused, body = exc.status_code or 0, exc.body
        return seen, [str(e.event_id) for e in everything.events or []], refused, body

    seen, everything, refused, body = await asyncio.to_thread(search)
    assert seen == ids[::-1]
    assert everything == [*ids, *refunds]
    assert refused == 400 and body["errors"][0]["category"] == "INVALID_REQUEST_ERROR"


async def test_square_filters_time_range_retention_and_enabling(
    serve: Callable[[Any], str],
) -> None:
    square = SquareEmulator(SQUARE_TOKEN, NOTIFICATION_URL, location_ids=["LOC1", "LOC2"])
    clock = Clock(time.time())
    square.now = clock
    old = square.add_event(clock.t - 29 * DAY, location_id="LOC2")
    edge = square.add_event(clock.t - 27 * DAY, location_id="LOC2")
    mine = square.add_event(clock.t - 3600, location_id="LOC1")
    theirs = square.add_event(clock.t - 3500, location_id="LOC2", merchant_id="OTHER")
    square.enabled = False
    hidden = square.add_event(clock.t - 60)
    base = serve(square.app)
    auth = {"Authorization": f"Bearer {SQUARE_TOKEN}", "Square-Version": "2026-09-16"}

    async def search(client: httpx.AsyncClient, body: dict[str, Any]) -> list[str]:
        answer = await client.post("/v2/events", json=body)
        assert answer.status_code == 200, answer.text
        return [e["event_id"] for e in answer.json().get("events", [])]

    async with httpx.AsyncClient(base_url=base, headers=auth) as client:
        every = await search(client, {})
        located = await search(client, {"query": {"filter": {"location_ids": ["LOC1"]}}})
        merchant = await search(client, {"query": {"filter": {"merchant_ids": ["OTHER"]}}})
        start = square.event(mine)["created_at"]
        end = square.event(theirs)["created_at"]
        ranged = await search(
            client, {"query": {"filter": {"created_at": {"start_at": start, "end_at": end}}}}
        )
        too_many = await client.post("/v2/events", json={"limit": 101})
        bad_cursor = await client.post("/v2/events", json={"cursor": "nope"})
        bad_version = await client.post("/v2/events", json={}, headers={"Square-Version": "v2"})
        enabled = await client.put("/v2/events/enable")
        clock.t += 2 * DAY
        later = await search(client, {})
    event = square.event(mine)
    assert set(event) == {"merchant_id", "location_id", "type", "event_id", "created_at", "data"}
    assert set(event["data"]) == {"type", "id", "object"}
    assert every == [theirs, mine, edge] and old not in every and hidden not in every
    assert located == [mine]
    assert merchant == [theirs]
    assert ranged == [mine]
    assert too_many.status_code == 400 and too_many.json()["errors"][0]["field"] == "limit"
    assert bad_cursor.status_code == 400
    assert bad_version.json()["errors"][0]["code"] == "INVALID_SQUARE_VERSION_FORMAT"
    assert enabled.status_code == 200 and square.enabled
    assert later == [theirs, mine]


async def test_square_webhooks_are_signed_over_the_notification_url(
    target: tuple[Target, str],
) -> None:
    recorder, target_url = target
    square = SquareEmulator(SQUARE_TOKEN, NOTIFICATION_URL)
    ids = square.add_events(4, time.time() - 60, 1)
    async with httpx.AsyncClient() as client:
        statuses = await square.send_webhooks(
            client, target_url, SQUARE_KEY, drop={ids[0]}, duplicate={ids[1]}
        )
    assert set(statuses) == set(ids[1:])
    assert recorder.keys() == collections.Counter({ids[1]: 2, ids[2]: 1, ids[3]: 1})
    for headers, body in recorder.received:
        signature = headers["x-square-hmacsha256-signature"]
        assert verify_signature(
            request_body=body.decode(),
            signature_header=signature,
            signature_key=SQUARE_KEY,
            notification_url=NOTIFICATION_URL,
        )
        assert not verify_signature(
            request_body=body.decode(),
            signature_header=signature,
            signature_key=SQUARE_KEY,
            notification_url=target_url,
        )
        assert json.loads(body) == square.event(json.loads(body)["event_id"])


async def test_square_auth_and_faults(serve: Callable[[Any], str]) -> None:
    square = SquareEmulator(SQUARE_TOKEN, NOTIFICATION_URL)
    square.add_events(1, time.time(), 1)
    base = serve(square.app)
    async with httpx.AsyncClient(base_url=base) as client:
        missing = await client.post("/v2/events", json={})
        wrong = await client.post(
            "/v2/events", json={}, headers={"Authorization": "Bearer EAAAwrong"}
        )
        square.fail_next(429, retry_after=2)
        limited = await client.post(
            "/v2/events", json={}, headers={"Authorization": f"Bearer {SQUARE_TOKEN}"}
        )
        square.fail_next(500)
        broken = await client.post(
            "/v2/events", json={}, headers={"Authorization": f"Bearer {SQUARE_TOKEN}"}
        )
    assert [missing.status_code, wrong.status_code] == [401, 401]
    assert wrong.json()["errors"][0]["code"] == "UNAUTHORIZED"
    assert limited.status_code == 429 and limited.headers["retry-after"] == "2"
    assert limited.json()["errors"][0]["code"] == "RATE_LIMITED"
    assert broken.status_code == 500 and broken.json()["errors"][0]["category"] == "API_ERROR"


# -- GitLab --------------------------------------------------------------------------


def gitlab_auth() -> dict[str, str]:
    return {"PRIVATE-TOKEN": GITLAB_TOKEN}


async def test_gitlab_events_page_by_number_newest_first_within_seven_days(
    serve: Callable[[Any], str],
) -> None:
    gitlab = GitLabEmulator(GITLAB_TOKEN)
    clock = Clock(time.time())
    gitlab.now = clock
    old = gitlab.add_event(clock.t - 9 * DAY)
    keys = gitlab.add_events(45, clock.t - 3600, 30)
    base = serve(gitlab.app)
    path = "/projects/octo%2Fhello/hooks/7/events"
    async with httpx.AsyncClient(base_url=base, headers=gitlab_auth()) as client:
        pages, page = [], "1"
        while page:
            answer = await client.get(path, params={"per_page": 20, "page": page})
            assert answer.status_code == 200
            pages.append(answer)
            page = answer.headers["x-next-page"]
        by_id = await client.get("/projects/42/hooks/7/events")
        unencoded = await client.get("/projects/octo/hello/hooks/7/events")
        other_hook = await client.get("/projects/42/hooks/8/events")
        too_many = await client.get(path, params={"per_page": 21})
        bearer = await client.get(path, headers={"Authorization": f"Bearer {GITLAB_TOKEN}"})
    listed = [e for p in pages for e in p.json()]
    assert [len(p.json()) for p in pages] == [20, 20, 5]
    assert [e["request_headers"]["Idempotency-Key"] for e in listed] == keys[::-1]
    assert old not in {e["request_headers"]["Idempotency-Key"] for e in listed}
    first = pages[0]
    assert (first.headers["x-total"], first.headers["x-total-pages"]) == ("45", "3")
    assert 'rel="next"' in first.headers["link"] and first.headers["x-prev-page"] == ""
    entry = listed[0]
    assert tuple(entry) == GITLAB_LOG_FIELDS
    assert entry["request_headers"]["X-Gitlab-Token"] == "[REDACTED]"
    assert entry["request_headers"]["X-Gitlab-Event"] == "Push Hook"
    assert entry["request_data"]["user_email"] == "[REDACTED]"
    assert entry["response_status"] == "200" and entry["trigger"] == "push_hooks"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["created_at"])
    assert len(by_id.json()) == 20
    assert unencoded.status_code == 404 and other_hook.status_code == 404
    assert too_many.status_code == 400
    assert bearer.status_code == 200


async def test_gitlab_status_filter_follows_the_receivers_answers(
    target: tuple[Target, str], serve: Callable[[Any], str]
) -> None:
    recorder, target_url = target
    gitlab = GitLabEmulator(GITLAB_TOKEN)
    keys = gitlab.add_events(4, time.time() - 60, 1)
    async with httpx.AsyncClient() as client:
        await gitlab.send_webhooks(client, target_url, GITLAB_SECRET, drop={keys[0]})
    base = serve(gitlab.app)
    path = "/projects/42/hooks/7/events"
    async with httpx.AsyncClient(base_url=base, headers=gitlab_auth()) as client:
        failed = (await client.get(path, params={"status": "server_failure"})).json()
        ok = (await client.get(path, params={"status": "successful"})).json()
        exact = (await client.get(path, params={"status": "202"})).json()
    assert [e["request_headers"]["Idempotency-Key"] for e in failed] == [keys[0]]
    assert failed[0]["response_status"] == "internal error"
    assert len(ok) == 3 and len(exact) == 3
    headers, body = recorder.received[0]
    assert headers["x-gitlab-token"] == GITLAB_SECRET
    assert "admin@example.com" in body.decode(), "the webhook carries the real address"


async def test_gitlab_resend_sends_the_logged_request_again_five_a_minute(
    target: tuple[Target, str], serve: Callable[[Any], str]
) -> None:
    recorder, target_url = target
    gitlab = GitLabEmulator(GITLAB_TOKEN)
    gitlab.webhook_target = (target_url, GITLAB_SECRET)
    keys = gitlab.add_events(6, time.time() - 600, 10)
    entries = [gitlab.logs_for(k)[0] for k in keys]
    base = serve(gitlab.app)
    async with httpx.AsyncClient(base_url=base, headers=gitlab_auth()) as client:
        answers = [
            await client.post(f"/projects/42/hooks/7/events/{e['id']}/resend") for e in entries
        ]
        gitlab.resends_per_minute = 100
        missing = await client.post("/projects/42/hooks/7/events/1/resend")
        gitlab.hook_url = "https://elsewhere.example/hook"
        moved = await client.post(f"/projects/42/hooks/7/events/{entries[0]['id']}/resend")
    assert [a.status_code for a in answers] == [201] * 5 + [429]
    assert answers[0].json() == {"response_status": 202}
    assert answers[5].headers["retry-after"] == "60"
    assert "too many times" in answers[5].json()["message"]["error"]
    assert missing.status_code == 404
    assert moved.status_code == 422
    assert len(recorder.received) == 5
    headers, body = recorder.received[0]
    assert headers["idempotency-key"] == keys[0]
    assert headers["x-gitlab-token"] == GITLAB_SECRET
    assert headers["x-gitlab-event-uuid"] != entries[0]["request_headers"]["X-Gitlab-Event-UUID"]
    assert json.loads(body) == entries[0]["request_data"], "GitLab resends what it logged"
    assert len(gitlab.logs_for(keys[0])) == 2
    assert gitlab.resent[0] == (keys[0], 202)


async def test_gitlab_auth_and_faults(serve: Callable[[Any], str]) -> None:
    gitlab = GitLabEmulator(GITLAB_TOKEN)
    gitlab.add_events(1, time.time(), 1)
    base = serve(gitlab.app)
    path = "/projects/42/hooks/7/events"
    async with httpx.AsyncClient(base_url=base) as client:
        missing = await client.get(path)
        wrong = await client.get(path, headers={"PRIVATE-TOKEN": "glpat-wrong"})
        gitlab.fail_next(429, retry_after=4)
        limited = await client.get(path, headers=gitlab_auth())
        gitlab.fail_next(502)
        broken = await client.get(path, headers=gitlab_auth())
    assert [missing.status_code, wrong.status_code] == [401, 401]
    assert wrong.json() == {"message": "401 Unauthorized"}
    assert limited.status_code == 429 and limited.headers["retry-after"] == "4"
    assert limited.headers["ratelimit-remaining"] == "0"
    assert broken.status_code == 502
