"""``hmac`` and ``token`` sources through the receiver and ``hookd send-test``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from hookd.cli.parser import build_parser
from hookd.cli.send_test import cmd_send_test
from hookd.settings import Settings
from hookd.sources import parse_sources
from tests.support.asgi import running_app
from tests.support.http import serve_app

pytestmark = pytest.mark.anyio
SOURCES = """
[[sources]]
name = "h"
provider = "hmac"
secrets = ["hmac-secret"]
[sources.verify]
header = "X-Signature"
prefix = "sha512="
algorithm = "sha512"
encoding = "base64"
signed = "timestamp_body"
timestamp_header = "X-Timestamp"
dedupe = "json:id"
type_json = "type"

[[sources]]
name = "t"
provider = "token"
secrets = ["old-token", "token-secret"]
[sources.verify]
header = "X-Gitlab-Token"
dedupe = "header:X-Event-Id"
type_header = "X-Event-Type"
"""


@pytest.mark.parametrize(("name", "secret"), [("h", "hmac-secret"), ("t", "token-secret")])
async def test_receive_then_duplicate_and_send_test(
    name: str, secret: str, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = parse_sources(SOURCES, Path("hookd.toml"), {})
    source = sources.get(name)
    assert source is not None
    headers, body = source.adapter.sample_event(secret, 1, int(time.time()))
    async with running_app(sources, sqlite_url, reconcile_schedule=False) as (app, client):
        first = await client.post(f"/hooks/{name}", content=body, headers=headers)
        again = await client.post(f"/hooks/{name}", content=body, headers=headers)
        assert first.status_code == 202, first.text
        assert again.status_code == 200
        assert again.json() == {"event_id": first.json()["event_id"], "status": "duplicate"}
        forged = await client.post(f"/hooks/{name}", content=body + b" ", headers=headers)
        if name == "h":
            assert forged.status_code == 401
            assert forged.json() == {"error": "bad_signature"}
        async with serve_app(app) as hookd_url:
            args = build_parser().parse_args(
                ["send-test", name, "--count", "2", "--url", f"{hookd_url}/hooks/{name}"]
            )
            settings = Settings(database_url=sqlite_url)
            assert await asyncio.to_thread(cmd_send_test, args, settings, sources) == 0
    sent = capsys.readouterr().out.splitlines()
    assert [line.split(" ", 1)[0] for line in sent] == ["202", "202"]
