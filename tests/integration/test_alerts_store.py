"""Alerts and their outbox in the store (``store.admin.alerts``), on SQLite and
PostgreSQL: what one evaluation's findings do to the alerts (open, refresh, resolve
only the kinds evaluated), the messages each change queues (grouped per channel and
kind, held ``group_s`` after the last, reminders after the quiet time while nobody
acknowledged), a resolution by hand told only to the channels that heard of the
alert, and the senders' claims (never one message to two) and their fenced outcomes."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from store.admin import alerts as store_alerts
from store.admin.alerts import CLAIM_S, Wanted
from store.status import NotificationStatus
from tests.support.alerts import (
    Channels,
    alert_row,
    alert_rows,
    apply,
    at,
    breaker,
    dead,
    failing,
    messages,
)

pytestmark = pytest.mark.anyio


async def test_findings_open_refresh_and_resolve_only_the_kinds_evaluated(
    engine: AsyncEngine,
) -> None:
    first = await apply(engine, [dead(), breaker()], at(0))
    assert len(first.opened) == 2 and not first.refreshed and not first.resolved
    # The breakers could not be read this time: its alert stays as it was.
    second = await apply(engine, [dead(count=15)], at(60), evaluated=["dead"])
    assert second.refreshed == [first.opened[0]] and not second.opened
    assert not second.resolved
    rows = {row.kind: row for row in await alert_rows(engine)}
    assert rows["dead"]._mapping["count"] == 2 and rows["dead"].value == 15.0
    assert rows["dead"].first_seen == at(0) and rows["dead"].last_seen == at(60)
    assert rows["breaker_open"]._mapping["count"] == 1 and rows["breaker_open"].last_seen == at(0)
    # Both read, neither found: both resolve by themselves.
    third = await apply(engine, [], at(120), evaluated=["dead", "breaker_open"])
    assert sorted(third.resolved) == sorted(first.opened)
    for row in await alert_rows(engine):
        assert row.status == "resolved" and row.resolved_at == at(120)
        assert row.resolved_by == "hookd: the condition cleared"
    # Found again after it resolved: a new alert, the old one kept as history.
    fourth = await apply(engine, [dead()], at(180))
    assert fourth.opened and fourth.opened[0] not in first.opened
    statuses = sorted((row.kind, row.status) for row in await alert_rows(engine))
    assert statuses == [("breaker_open", "resolved"), ("dead", "open"), ("dead", "resolved")]


async def test_opened_alerts_make_one_message_per_channel_and_kind(engine: AsyncEngine) -> None:
    route = Channels(Wanted("ops", 0), Wanted("pager", 0))
    keys = ["github", "stripe", "gitlab"]
    changes = await apply(
        engine, [*(dead(k) for k in keys), breaker()], at(0), route=route, group_s=60
    )
    assert changes.queued == 8  # 4 alerts, 2 channels each
    found = {(m.channel, m.kind): m for m in await messages(engine)}
    assert set(found) == {(c, k) for c in ("ops", "pager") for k in ("dead", "breaker_open")}
    by_key = {row.id: row.key for row in await alert_rows(engine)}
    for (_, kind), message in found.items():
        assert message.what == "opened" and message.status == "pending"
        assert message.next_attempt_at == at(0), "the first of its kind goes at once"
        shown = sorted(by_key[i] for i in message.alert_ids)
        assert shown == (sorted(keys) if kind == "dead" else ["stripe/billing"])
    # Each alert records when each channel last heard of it: what reminders go by.
    for row in await alert_rows(engine):
        assert set(row.notified) == {"ops", "pager"}


async def test_a_second_message_is_held_group_s_after_the_first(engine: AsyncEngine) -> None:
    route = Channels(Wanted("ops", 0))
    await apply(engine, [dead("github")], at(0), route=route, group_s=60)
    [first] = await store_alerts.claim(engine, "sender-1", at(0), 10)
    assert await store_alerts.finish(
        engine, first.id, "sender-1", at(1), status=NotificationStatus.SENT
    )
    # Another alert of the kind 10 s later: a new message, held until 60 s after the first.
    await apply(engine, [dead("github"), dead("stripe")], at(10), route=route, group_s=60)
    # A third, while the second waits: it joins the second.
    await apply(
        engine, [dead("github"), dead("stripe"), dead("gitlab")], at(20), route=route, group_s=60
    )
    sent, held = await messages(engine)
    assert sent.id == first.id and sent.status == "sent"
    assert held.next_attempt_at == at(60) and len(held.alert_ids) == 2
    assert await store_alerts.claim(engine, "sender-1", at(59), 10) == []
    [claimed] = await store_alerts.claim(engine, "sender-1", at(60), 10)
    assert claimed.id == held.id
    assert await store_alerts.finish(
        engine, held.id, "sender-1", at(61), status=NotificationStatus.SENT
    )
    # Long after the last: the next goes at once.
    await apply(
        engine, [dead(k) for k in ("github", "stripe", "gitlab", "x")], at(500), route=route
    )
    last = (await messages(engine))[-1]
    assert last.next_attempt_at == at(500) and last.status == "pending"


async def test_reminders_only_for_open_alerts_after_the_quiet_time(engine: AsyncEngine) -> None:
    route = Channels(Wanted("ops", 300), Wanted("quiet", 0))
    found = [dead("github"), dead("stripe")]
    opened = (await apply(engine, found, at(0), route=route)).opened
    watched, handled = opened
    assert await store_alerts.acknowledge(engine, handled, "api token:admin", at(5))
    assert not await store_alerts.acknowledge(engine, handled, "api token:admin", at(6))
    await apply(engine, found, at(299), route=route)
    assert [m.what for m in await messages(engine)] == ["opened", "opened"]
    changes = await apply(engine, found, at(301), route=route)
    assert changes.queued == 1
    reminder = (await messages(engine))[-1]
    assert (reminder.channel, reminder.what, reminder.alert_ids) == ("ops", "reminder", [watched])
    # The quiet time counts again from the reminder.
    assert (await apply(engine, found, at(500), route=route)).queued == 0
    assert (await apply(engine, found, at(602), route=route)).queued == 1
    row = await alert_row(engine, handled)
    assert row.status == "acknowledged" and row.acknowledged_by == "api token:admin"


async def test_a_resolution_by_hand_is_told_only_to_the_channels_that_heard(
    engine: AsyncEngine,
) -> None:
    route = Channels(Wanted("ops", 0))
    [alert_id] = (await apply(engine, [failing()], at(0), route=route)).opened
    route.wanted.append(Wanted("pager", 0))  # a channel added since: it never heard of it
    assert await store_alerts.resolve(
        engine, alert_id, "cli user:ana", at(30), route=route, group_s=60
    )
    assert not await store_alerts.resolve(
        engine, alert_id, "cli user:ana", at(31), route=route, group_s=60
    )
    row = await alert_row(engine, alert_id)
    assert (row.status, row.resolved_by, row.resolved_at) == ("resolved", "cli user:ana", at(30))
    told = [(m.channel, m.what, m.alert_ids) for m in await messages(engine)]
    assert told == [("ops", "opened", [alert_id]), ("ops", "resolved", [alert_id])]
    # Still found at the next evaluation: a new alert, told to both (to ops in its
    # message not sent yet, which takes the next alert of the kind in).
    [new] = (await apply(engine, [failing()], at(60), route=route)).opened
    assert new != alert_id
    opened = {m.channel: m.alert_ids for m in await messages(engine) if m.what == "opened"}
    assert opened == {"ops": [alert_id, new], "pager": [new]}


async def test_a_claim_never_hands_one_message_to_two_senders(engine: AsyncEngine) -> None:
    route = Channels(*(Wanted(f"channel-{i}", 0) for i in range(12)))
    await apply(engine, [dead()], at(0), route=route)
    assert len(await messages(engine)) == 12
    owners = [f"sender-{i}" for i in range(6)]
    taken: list[str] = []
    # Six senders at once, round after round, until the outbox is empty: on SQLite they
    # may pick the same messages, and each gets only those still free.
    for _ in range(12):
        claims = await asyncio.gather(
            *(store_alerts.claim(engine, owner, at(1), 3) for owner in owners)
        )
        for owner, rows in zip(owners, claims, strict=True):
            assert all(row.lease_owner == owner for row in rows)
            taken += [row.id for row in rows]
        if not any(claims):
            break
    assert len(taken) == len(set(taken)) == 12, "a message was handed to two senders"
    # Held: nobody takes them again until the claims run out ...
    assert await store_alerts.claim(engine, "late", at(1 + CLAIM_S - 1), 20) == []
    # ... then one sender takes them all over.
    retaken = await store_alerts.claim(engine, "late", at(2 + CLAIM_S), 20)
    assert sorted(row.id for row in retaken) == sorted(taken)


async def test_an_outcome_counts_only_from_the_sender_that_holds_the_claim(
    engine: AsyncEngine,
) -> None:
    await apply(engine, [dead()], at(0), route=Channels(Wanted("ops", 0)))
    [message] = await store_alerts.claim(engine, "first", at(0), 1)
    assert not await store_alerts.finish(
        engine, message.id, "other", at(1), status=NotificationStatus.SENT
    )
    [row] = await messages(engine)
    assert (row.status, row.lease_owner, row.attempts) == ("pending", "first", 0)
    # The first sender stalls past its claim; another takes the message over.
    [taken] = await store_alerts.claim(engine, "second", at(CLAIM_S + 1), 1)
    assert taken.id == message.id
    assert not await store_alerts.finish(
        engine, message.id, "first", at(CLAIM_S + 2), status=NotificationStatus.SENT
    )
    retry_at = at(CLAIM_S + 60)
    assert await store_alerts.finish(
        engine,
        message.id,
        "second",
        at(CLAIM_S + 2),
        status=NotificationStatus.PENDING,
        error="HTTP 503 from the channel",
        retry_at=retry_at,
    )
    [row] = await messages(engine)
    assert (row.status, row.lease_owner, row.attempts) == ("pending", None, 1)
    assert row.next_attempt_at == retry_at and row.last_error == "HTTP 503 from the channel"
    assert await store_alerts.claim(engine, "third", retry_at - timedelta(seconds=1), 1) == []
    [again] = await store_alerts.claim(engine, "third", retry_at, 1)
    assert await store_alerts.finish(
        engine, again.id, "third", retry_at, status=NotificationStatus.SENT
    )
    [row] = await messages(engine)
    assert (row.status, row.attempts, row.sent_at) == ("sent", 2, retry_at)
    assert await store_alerts.claim(engine, "fourth", at(10_000), 1) == []
