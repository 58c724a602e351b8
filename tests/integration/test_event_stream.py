"""The event stream's bounds (``hookd.ops.stream``), on SQLite and PostgreSQL: an event
whose commit comes after a larger id was sent (a smaller id made visible late) is still
sent, once; a resume sends the look-back window again; a fresh stream sends nothing of
what was there before it. The stream is read from the real
``EventStream`` over the app's engine; the events are real deliveries."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from hookd.ops.stream import EventStream, StreamQuery
from hookd.sources import parse_sources
from store.crypto import BodyCipher
from store.ids import id_floor, id_time_ms
from tests.support.asgi import running_app
from tests.support.data import scalar
from tests.support.stripe_source import deliver, stripe_source

pytestmark = pytest.mark.anyio


def event(n: int) -> dict[str, Any]:
    return {"id": f"evt_stream_{n}", "object": "event", "type": "invoice.paid", "data": {}}


async def frames_of(stream: AsyncIterator[bytes], count: int) -> list[dict[str, Any]]:
    """The next ``count`` events of the stream (comment lines skipped)."""
    found: list[dict[str, Any]] = []
    while len(found) < count:
        chunk = (await anext(stream)).decode()
        for line in chunk.splitlines():
            if line.startswith("data: "):
                found.append(json.loads(line.removeprefix("data: ")))
    return found


async def test_a_late_commit_is_sent_once_and_a_resume_sends_the_window_again(
    tmp_path: Path, db_url: str
) -> None:
    sources = parse_sources(stripe_source(handler=False), tmp_path / "hookd.toml")
    async with running_app(sources, db_url, prune_every_s=0) as (app, client):
        engine = app.state.engine
        stream = EventStream(engine, BodyCipher(""), 10.0, sources, poll_s=0.05, hold_back_s=0.2)
        fresh = StreamQuery()
        cursor, sent = await stream.start(fresh)
        assert (await deliver(client, event(1))).status_code == 202
        frames = stream.frames(fresh, cursor, sent)
        [first] = await frames_of(frames, 1)
        assert first["signed_now"] is True and "stripe-signature" in first["headers"]
        assert b"evt_stream_1" in base64.b64decode(first["body"])

        # A row whose id is older than the one sent, made visible only now: what a
        # commit slower than the hold-back looks like.
        late_id = id_floor((id_time_ms(first["id"]) or 0) - 1000)[:-1] + "1"
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "INSERT INTO events (id, source, provider, dedupe_key, type, origin, "
                    "received_at, occurred_at, verified_with, headers, body, body_encrypted, "
                    "status, attempts, next_attempt_at, created_at, updated_at) "
                    "SELECT :late, source, provider, 'evt_late', type, origin, received_at, "
                    "occurred_at, verified_with, headers, body, body_encrypted, status, "
                    "attempts, next_attempt_at, created_at, updated_at FROM events "
                    "WHERE id = :sent"
                ),
                {"late": late_id, "sent": first["id"]},
            )
        assert (await deliver(client, event(2))).status_code == 202
        late, second = await frames_of(frames, 2)
        assert late["id"] == late_id, "the late one first: it became visible first"
        assert second["id"] > first["id"]
        await frames.aclose()

        # A resume after the newest: the look-back window again (the client skips it).
        resumed = stream.frames(StreamQuery(after=second["id"]), second["id"], set())
        again = await frames_of(resumed, 3)
        await resumed.aclose()
        assert [f["id"] for f in again] == sorted([late_id, first["id"], second["id"]])

        # A fresh stream: nothing of what is stored, then the next one only.
        cursor, sent = await stream.start(StreamQuery())
        assert {late_id, first["id"], second["id"]} <= sent
        frames = stream.frames(StreamQuery(), cursor, sent)
        assert (await deliver(client, event(3))).status_code == 202
        [third] = await frames_of(frames, 1)
        await frames.aclose()
        assert b"evt_stream_3" in base64.b64decode(third["body"])
        assert await scalar(db_url, "SELECT count(*) FROM events") == 4
