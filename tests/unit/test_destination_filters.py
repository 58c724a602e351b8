"""Destination and handler filters (``processing.filters``), the sources file's routing
keys and their errors (``hookd.routing``), and the in-process rate limit."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from hookd.event import Event
from hookd.routing import FilterConfig
from hookd.sources import parse_sources
from processing import filters
from processing.filters import Document, Selector
from processing.limits import LocalLimits, Wait
from tests.support.sources_file import error_of

SECRET = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ="
GH = '[[sources]]\nname = "gh"\nprovider = "github"\nsecrets = ["s"]\n'


def event(
    kind: str | None = "invoice.paid",
    body: Any = None,
    headers: dict[str, str] | None = None,
    origin: str = "webhook",
    raw: bytes | None = None,
) -> Event:
    return Event(
        id="01J0000000000000000000000A",
        source="s",
        provider="stripe",
        type=kind,
        dedupe_key="k",
        origin=origin,
        received_at=datetime.now(UTC),
        headers=headers or {},
        body=raw if raw is not None else json.dumps(body or {}).encode(),
    )


def selects(config: dict[str, Any], e: Event) -> bool:
    selector = Selector.of(FilterConfig.model_validate(config))
    return selector is None or selector.selects(e, Document(e.body))


def test_no_filter_keys_select_everything() -> None:
    assert Selector.of(FilterConfig()) is None


@pytest.mark.parametrize(
    ("kind", "selected"),
    [
        ("invoice.paid", True),
        ("invoice.created", True),
        ("invoice.deleted", False),
        ("customer.deleted", False),
        ("charge.succeeded", False),
        (None, False),
    ],
)
def test_type_globs_include_and_bang_excludes(kind: str | None, selected: bool) -> None:
    config = {"types": ["invoice.*", "!*.deleted"]}
    assert selects(config, event(kind)) is selected


def test_only_excludes_select_the_rest_and_events_without_a_type() -> None:
    config = {"types": ["!invoice.deleted"]}
    assert selects(config, event("charge.succeeded"))
    assert selects(config, event(None))
    assert not selects(config, event("invoice.deleted"))


def test_type_globs_are_case_sensitive() -> None:
    assert not selects({"types": ["invoice.*"]}, event("Invoice.paid"))


@pytest.mark.parametrize(
    ("value", "wanted", "selected"),
    [
        (True, True, True),
        (1, True, False),  # JSON true is not 1
        (True, 1, False),
        (1, 1.0, True),
        ("1", 1, False),
        ("eu", ["eu", "us"], True),  # a list means "in"
        ("ap", ["eu", "us"], False),
    ],
)
def test_where_compares_as_json_does(value: Any, wanted: Any, selected: bool) -> None:
    body = {"data": {"object": {"field": value}}}
    assert selects({"where": {"data.object.field": wanted}}, event(body=body)) is selected


def test_where_exists_and_not_exists_and_list_indexes() -> None:
    body = {"data": {"items": [{"price": 5}], "email": None}}
    assert selects({"where": {"data.items.0.price": 5}}, event(body=body))
    assert not selects({"where": {"data.items.1.price": 5}}, event(body=body))
    assert selects({"where": {"data.email": {"exists": True}}}, event(body=body))
    assert selects({"where": {"data.phone": {"exists": False}}}, event(body=body))
    assert not selects({"where": {"data.phone": {"exists": True}}}, event(body=body))


def test_every_where_key_must_hold() -> None:
    body = {"a": 1, "b": 2}
    assert selects({"where": {"a": 1, "b": 2}}, event(body=body))
    assert not selects({"where": {"a": 1, "b": 3}}, event(body=body))


def test_a_body_that_is_not_json_has_no_paths() -> None:
    raw = b"not json"
    assert not selects({"where": {"a": 1}}, event(raw=raw))
    assert selects({"where": {"a": {"exists": False}}}, event(raw=raw))


def test_a_form_encoded_payload_field_is_read_as_json() -> None:
    raw = urlencode({"payload": json.dumps({"action": "opened"})}).encode()
    assert selects({"where": {"action": "opened"}}, event(raw=raw))


def test_where_headers_match_names_in_any_case() -> None:
    e = event(headers={"X-Tenant": "a", "X-Count": "3"})
    assert selects({"where_headers": {"x-tenant": ["a", "b"]}}, e)
    assert selects({"where_headers": {"X-COUNT": 3}}, e)
    assert not selects({"where_headers": {"x-tenant": "c"}}, e)
    assert selects({"where_headers": {"x-missing": {"exists": False}}}, e)


def test_origins_select_how_the_event_came() -> None:
    assert selects({"origins": ["reconcile"]}, event(origin="reconcile"))
    assert not selects({"origins": ["webhook"]}, event(origin="reconcile"))


def test_the_body_is_parsed_once_for_every_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []
    real = filters.parse_body

    def counted(body: bytes) -> Any:
        calls.append(body)
        return real(body)

    monkeypatch.setattr(filters, "parse_body", counted)
    e = event(body={"a": 1, "b": 2})
    document = Document(e.body)
    chosen = [
        Selector.of(FilterConfig.model_validate({"where": {key: value}}))
        for key, value in (("a", 1), ("b", 2), ("a", 3))
    ]
    assert [s.selects(e, document) for s in chosen if s is not None] == [True, True, False]
    assert calls == [e.body]


def destination(name: str = "billing", extra: str = "") -> str:
    return (
        f'[[sources.destinations]]\nname = "{name}"\nurl = "https://billing.internal/in"\n'
        f'secret = "{SECRET}"\n{extra}'
    )


def test_destinations_and_handler_tables_parse_and_plain_handlers_keep_working() -> None:
    text = (
        GH
        + 'handlers = ["m:on_all", { ref = "m:on_invoice", types = ["invoice.*"] }]\n'
        + destination(extra='types = ["push"]\nrate_per_s = 50\nconcurrency = 4\n')
        + destination("crm", 'where = { "repository.private" = false }\n')
    )
    config = parse_sources(text, Path("hookd.toml"), env={}).by_name["gh"].config
    assert config.handler_refs == ("m:on_all", "m:on_invoice")
    assert config.handlers[1].types == ("invoice.*",)
    assert [d.name for d in config.destinations] == ["billing", "crm"]
    assert config.destinations[0].rate_per_s == 50 and config.destinations[0].concurrency == 4
    assert config.destinations[1].where == {"repository.private": False}
    assert config.destinations[0].breaker.failures == 5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            GH + destination(extra='typs = ["x"]\n'),
            "hookd.toml: source 'gh': key 'destinations.billing.typs': unknown key "
            "(did you mean 'types'?)",
        ),
        (
            GH + destination(extra="breaker = { failres = 3 }\n"),
            "hookd.toml: source 'gh': key 'destinations.billing.breaker.failres': unknown key "
            "(did you mean 'failures'?)",
        ),
        (
            GH + destination() + destination(),
            "hookd.toml: source 'gh': key 'destinations.billing.name': a duplicate "
            "destination name; give each destination its own name",
        ),
        (
            GH + '[sources.forward]\nurl = "https://x/"\nsecret = "' + SECRET + '"\n'
            "" + destination("forward"),
            "hookd.toml: source 'gh': key 'destinations.forward.name': the "
            "[sources.forward] table's ledger name; give each destination its own name",
        ),
        (
            GH + destination(extra="rate_per_s = 0\n"),
            "hookd.toml: source 'gh': key 'destinations.billing.rate_per_s': "
            "must be greater than 0",
        ),
        (
            GH + destination(extra='where = { "a" = { exist = true } }\n'),
            "hookd.toml: source 'gh': key 'destinations.billing.where': 'a': "
            "a table must be { exists = true } or { exists = false }",
        ),
        (
            GH + destination(extra='origins = ["web"]\n'),
            "hookd.toml: source 'gh': key 'destinations.billing.origins': 'web' "
            "is not an origin: use webhook, reconcile, replay",
        ),
        (
            GH + destination(extra='transform = "not a ref"\n'),
            "hookd.toml: source 'gh': key 'destinations.billing.transform': "
            "'not a ref' is not \"module:function\"",
        ),
    ],
)
def test_a_bad_destination_is_one_line_naming_source_destination_and_key(
    text: str, message: str
) -> None:
    assert error_of(text) == message


def test_a_destination_secret_must_be_a_standard_webhooks_secret() -> None:
    text = GH + destination().replace(SECRET, "plain-secret")
    assert error_of(text) == (
        "hookd.toml: source 'gh': key 'destinations.billing.secret': must be a "
        "whsec_ secret (Standard Webhooks)"
    )
    assert "plain-secret" not in error_of(text.replace("plain-secret", "whsec_plain-secret"))


@pytest.mark.anyio
async def test_the_local_rate_limit_grants_per_s_then_says_how_long_to_wait() -> None:
    limits = LocalLimits()
    granted = 0
    started = time.monotonic()
    for _ in range(5):
        async with limits.rate("s/d", 5, 10.0, 0.0) as waited:
            assert waited is None
            granted += 1
    async with limits.rate("s/d", 5, 10.0, 0.0) as waited:
        assert isinstance(waited, Wait) and 0 < waited.seconds <= 1.01
    assert granted == 5 and time.monotonic() - started < 0.5
    # Another destination has its own limit.
    async with limits.rate("s/other", 5, 10.0, 0.0) as waited:
        assert waited is None


@pytest.mark.anyio
async def test_a_grant_in_flight_counts_until_its_request_ends() -> None:
    limits = LocalLimits()
    async with limits.rate("s/d", 1, 10.0, 0.0) as waited:
        assert waited is None
        # In flight for longer than the window: still counted.
        async with limits.rate("s/d", 1, 10.0, 0.0) as other:
            assert isinstance(other, Wait)
