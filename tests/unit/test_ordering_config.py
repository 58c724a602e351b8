"""[sources.order]: the table's keys and their one-line errors, and what ``stamp`` reads
from an event: its object key (one path, or several joined with ":"), its version (a
number, or an RFC 3339 time in unix seconds) and the SHA-256 of its body."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import pytest

from hookd.ordering import MAX_KEY_CHARS, OrderConfig, object_version
from hookd.sources import parse_sources
from store.intake.events import NewEvent
from tests.support.sources_file import error_of

P = Path("hookd.toml")
STRIPE = '[[sources]]\nname = "pay"\nprovider = "stripe"\nsecrets = ["whsec_x"]\n'
GITHUB = '[[sources]]\nname = "gh"\nprovider = "github"\nsecrets = ["s"]\n'
RECONCILE = '[sources.reconcile]\ntoken = "sk_test_x"\n'


def order_of(text: str) -> OrderConfig:
    [source] = list(parse_sources(text, P, {}))
    assert source.config.order is not None
    return source.config.order


def event(body: bytes, content_type: str = "application/json") -> NewEvent:
    return NewEvent(
        source="pay",
        provider="stripe",
        dedupe_key="evt_1",
        type="customer.updated",
        origin="webhook",
        received_at=datetime.now(UTC),
        occurred_at=None,
        verified_with="stripe-v1;key=0",
        headers={"content-type": content_type},
        body=body,
    )


def test_a_source_without_the_table_has_no_ordering() -> None:
    [source] = list(parse_sources(STRIPE, P, {}))
    assert source.config.order is None


def test_the_table_takes_a_path_or_a_list_and_defaults_to_supersede() -> None:
    one = order_of(STRIPE + '[sources.order]\nkey = "data.object.id"\nversion = "created"\n')
    assert (one.key, one.version, one.stale, one.fetch) == (
        ("data.object.id",),
        "created",
        "supersede",
        False,
    )
    assert one.supersedes
    both = order_of(
        GITHUB + '[sources.order]\nkey = ["repository.full_name", "issue.number"]\n'
        'version = "issue.updated_at"\nstale = "run"\n'
    )
    assert both.key == ("repository.full_name", "issue.number")
    assert not both.supersedes


@pytest.mark.parametrize(
    ("table", "said"),
    [
        (
            'key = "data..id"\nversion = "created"\n',
            "key 'order.key': 'data..id' is not a dotted JSON path",
        ),
        (
            'key = 3\nversion = "created"\n',
            "key 'order.key': must be a JSON path or a list of them",
        ),
        ('version = "created"\n', "key 'order.key': is required; add it"),
        ('key = "id"\n', "key 'order.version': is required; add it"),
        (
            'key = "id"\nversion = "created"\nstale = "skip"\n',
            "key 'order.stale': must be 'supersede' or 'run', not 'skip'",
        ),
        (
            'key = "id"\nversion = "created"\nstal = "run"\n',
            "key 'order.stal': unknown key (did you mean 'stale'?)",
        ),
    ],
)
def test_a_wrong_table_is_one_line_naming_file_source_and_key(table: str, said: str) -> None:
    message = error_of(STRIPE + "[sources.order]\n" + table)
    assert message.startswith(f"hookd.toml: source 'pay': {said}"), message


def test_fetch_needs_a_provider_that_can_fetch_objects() -> None:
    message = error_of(GITHUB + '[sources.order]\nkey = "issue.id"\nversion = "x"\nfetch = true\n')
    assert message == (
        "hookd.toml: source 'gh': key 'order.fetch': github sources cannot fetch an event's "
        "object from the provider's API; remove fetch (handlers get the event as delivered)"
    )


def test_fetch_needs_the_reconcile_table_for_the_api() -> None:
    table = '[sources.order]\nkey = "related_object.id"\nversion = "created"\nfetch = true\n'
    message = error_of(STRIPE + table)
    assert "key 'order.fetch': fetching objects uses the provider's API" in message
    assert order_of(STRIPE + RECONCILE + table).fetch


def test_stamp_reads_a_stripe_event_s_object_and_version() -> None:
    body = json.dumps(
        {"id": "evt_1", "created": 1718000000, "data": {"object": {"id": "cus_123"}}}
    ).encode()
    order = OrderConfig(key=("data.object.id",), version="created")
    stamped = order.stamp(event(body))
    assert (stamped.object_key, stamped.object_version) == ("cus_123", 1718000000.0)
    assert stamped.payload_hash == hashlib.sha256(body).hexdigest()


def test_stamp_joins_several_paths_and_reads_an_rfc3339_version_from_a_form_body() -> None:
    payload = {
        "action": "edited",
        "repository": {"full_name": "octo-org/hello-world"},
        "issue": {"number": 42, "updated_at": "2024-06-10T06:13:20Z"},
    }
    body = ("payload=" + quote(json.dumps(payload))).encode()
    order = OrderConfig(key=("repository.full_name", "issue.number"), version="issue.updated_at")
    stamped = order.stamp(event(body, "application/x-www-form-urlencoded"))
    assert stamped.object_key == "octo-org/hello-world:42"
    assert stamped.object_version == datetime(2024, 6, 10, 6, 13, 20, tzinfo=UTC).timestamp()


def test_a_number_in_a_path_indexes_a_list() -> None:
    body = json.dumps({"items": [{"id": "a", "seq": 7}]}).encode()
    stamped = OrderConfig(key=("items.0.id",), version="items.0.seq").stamp(event(body))
    assert (stamped.object_key, stamped.object_version) == ("a", 7.0)


@pytest.mark.parametrize(
    "body",
    [
        {"created": 1, "data": {"object": {}}},  # no key
        {"data": {"object": {"id": "cus_1"}}},  # no version
        {"created": True, "data": {"object": {"id": "cus_1"}}},  # a boolean is no version
        {"created": "yesterday", "data": {"object": {"id": "cus_1"}}},
        {"created": 1, "data": {"object": {"id": {"nested": 1}}}},  # not a key
        {"created": 1, "data": {"object": {"id": "x" * (MAX_KEY_CHARS + 1)}}},
    ],
)
def test_an_event_without_a_readable_key_or_version_names_no_object(body: object) -> None:
    raw = json.dumps(body).encode()
    stamped = OrderConfig(key=("data.object.id",), version="created").stamp(event(raw))
    assert (stamped.object_key, stamped.object_version) == (None, None)
    assert stamped.payload_hash == hashlib.sha256(raw).hexdigest()


def test_a_body_that_is_no_json_names_no_object() -> None:
    stamped = OrderConfig(key=("id",), version="v").stamp(event(b"\xff not json"))
    assert stamped.object_key is None and stamped.payload_hash is not None


@pytest.mark.parametrize(
    ("value", "version"),
    [
        (12, 12.0),
        (1.5, 1.5),
        ("17", 17.0),
        ("2024-06-10T06:13:20.5+02:00", datetime(2024, 6, 10, 4, 13, 20, 500000, UTC).timestamp()),
        ("2013-12-03 17:23:34 UTC", datetime(2013, 12, 3, 17, 23, 34, tzinfo=UTC).timestamp()),
        ("NaN", None),
        ("inf", None),
        (None, None),
        ([1], None),
    ],
)
def test_versions_are_numbers_or_times(value: object, version: float | None) -> None:
    assert object_version(value) == version
