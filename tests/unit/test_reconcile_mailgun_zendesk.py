"""The parts of the Mailgun and Zendesk list adapters that read what the APIs answer
and say how requests authenticate, without a server (the emulator tests run the rest)."""

from __future__ import annotations

import base64
from pathlib import Path

from hookd.sources import Source, parse_sources
from reconcile.providers.mailgun import MailgunAdapter, event_time
from reconcile.providers.zendesk import ZendeskAdapter, header_map, sent_body

ZENDESK_SECRET = "dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3RpbmdfcHVycG9zZXNfb25seQ=="


def source(provider: str, table: str) -> Source:
    secret = ZENDESK_SECRET if provider == "zendesk" else "mailgun-signing-key"
    text = f"""
[[sources]]
name = "s"
provider = "{provider}"
secrets = ["{secret}"]
[sources.reconcile]
token = "tok"
{table}
"""
    return parse_sources(text, Path("hookd.toml"), env={}).by_name["s"]


def basic(header: str) -> str:
    scheme, _, value = header.partition(" ")
    assert scheme == "Basic"
    return base64.b64decode(value).decode()


def test_mailgun_sends_its_key_as_the_api_user() -> None:
    s = source("mailgun", 'domain = "mg.example.com"')
    assert basic(MailgunAdapter.auth_headers(s)["Authorization"]) == "api:tok"
    assert s.config.reconcile is not None
    assert s.config.reconcile.list_retention_days() == 1.0


def test_zendesk_sends_an_api_token_with_its_email_else_a_bearer_token() -> None:
    table = 'api_url = "https://acme.zendesk.com"\nwebhook_id = "01GB2G9R1Q0B1QJQXAJX2HRT5C"'
    with_email = source("zendesk", table + '\nemail = "admin@acme.example"')
    assert basic(ZendeskAdapter.auth_headers(with_email)["Authorization"]) == (
        "admin@acme.example/token:tok"
    )
    oauth = source("zendesk", table)
    assert ZendeskAdapter.auth_headers(oauth) == {"Authorization": "Bearer tok"}


def test_mailgun_event_time_is_a_number_never_a_bool_or_text() -> None:
    assert event_time({"timestamp": 1521472262.908181}) == 1521472262.908181
    assert event_time({"timestamp": 1521472262}) == 1521472262.0
    assert event_time({"timestamp": True}) is None
    assert event_time({"timestamp": "1521472262"}) is None
    assert event_time({}) is None


def test_zendesk_attempt_headers_as_an_object_or_as_pairs() -> None:
    assert header_map({"X-Zendesk-Webhook-Id": "01G", "Content-Type": "application/json"}) == {
        "x-zendesk-webhook-id": "01G",
        "content-type": "application/json",
    }
    pairs = [{"key": "X-Zendesk-Account-Id", "value": "12514403"}, {"value": "no key"}, "odd"]
    assert header_map(pairs) == {"x-zendesk-account-id": "12514403"}
    assert header_map(None) == {}


def test_zendesk_attempt_body_is_its_request_payload_text() -> None:
    assert sent_body({"request": {"payload": '{"ticket":1}'}}) == '{"ticket":1}'
    assert sent_body({"request": {"payload": {"ticket": 1}}}) is None
    assert sent_body({"request": {"headers": {}}}) is None
    assert sent_body({}) is None
