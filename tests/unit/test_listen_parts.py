"""The pieces of ``hookd listen`` that need no server: the stream's query as the API
reads it, the server-sent events parser, the ids a resumed stream skips, the URLs and
the re-signing secret it takes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hookd.cli.listen import Seen, Sse, check_url, resigner, server_sent
from hookd.errors import BadRequest, ConfigError
from hookd.ops.stream import parse_stream_query
from hookd.settings import Settings
from store.ids import new_id

pytestmark = pytest.mark.anyio

A, B = "01J8Z3Q4XW6N2V7C9D0E1F2G3H", "01J8Z3Q4XW6N2V7C9D0E1F2G3J"


def test_the_stream_query() -> None:
    query = parse_stream_query(["stripe", "github"], {"type": "invoice.*", "after": A}, None)
    assert (query.sources, query.type_glob, query.after) == (("stripe", "github"), "invoice.*", A)
    # Last-Event-ID wins over where the first connection started.
    resumed = parse_stream_query([], {"after": A, "last": "5"}, B)
    assert (resumed.after, resumed.last, resumed.since) == (B, None, None)
    assert parse_stream_query([], {"last": "10000"}, None).last == 10_000
    since = parse_stream_query([], {"since": "2026-01-02T03:04:05Z"}, None).since
    assert since is not None and since.tzinfo is not None
    for params, last_event_id, field in (
        ({"after": "nope"}, None, "after"),
        ({}, "nope", "after"),
        ({"last": "0"}, None, "last"),
        ({"last": "10001"}, None, "last"),
        ({"last": "\u0661"}, None, "last"),
        ({"since": "2026-01-02T03:04:05"}, None, "since"),
        ({"since": "yesterday"}, None, "since"),
        ({"after": A, "last": "3"}, None, "after"),
        ({"type": "a\x00"}, None, "text"),
    ):
        with pytest.raises(BadRequest) as refused:
            parse_stream_query([], params, last_event_id)
        assert refused.value.field == field, params


async def lines(*items: str) -> AsyncIterator[str]:
    for item in items:
        yield item


async def test_server_sent_events_are_parsed_as_the_standard_says() -> None:
    got = [
        sse
        async for sse in server_sent(
            lines(": comment", "retry: 1000", "", "id: 1", "event: event", "data: a", "data:b", "")
        )
    ]
    assert got == [Sse("1", "event", "a\nb")]


def test_seen_keeps_the_highest_id_and_skips_repeats() -> None:
    seen = Seen()
    first, second = new_id(), new_id()
    seen.add(second)
    seen.add(first)
    assert seen.cursor == max(first, second)
    assert first in seen and second in seen and new_id() not in seen


def test_urls_and_the_resign_secret_are_one_line_each() -> None:
    assert check_url("https://hookd.example.com/prefix", "--from").host == "hookd.example.com"
    for bad in ("ftp://x", "localhost:3000", "http://", ""):
        with pytest.raises(ConfigError, match="--to"):
            check_url(bad, "--to")
    with pytest.raises(ConfigError, match="HOOKD_LISTEN_RESIGN_SECRET"):
        resigner("")
    with pytest.raises(ConfigError, match="not a Standard Webhooks signing secret"):
        resigner("whsec_!!!")
    assert resigner("whsec_" + "QUJD" * 8).startswith("whsec_")


def test_the_listen_token_must_differ_from_the_others() -> None:
    with pytest.raises(ConfigError, match="HOOKD_ADMIN_TOKEN and HOOKD_LISTEN_TOKEN"):
        Settings.from_env(admin_token="same", listen_token="same")
    with pytest.raises(ConfigError, match="HOOKD_LISTEN_TOKEN"):
        Settings.from_env(listen_token="   ")
