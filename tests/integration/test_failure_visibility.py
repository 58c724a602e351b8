"""Why an event is retrying is visible while it retries: the handler, the exception
type and the message in the API, ``hookd events show`` and the admin UI, and the
handler and type (never the message, which may quote the body) in the log."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hookd.providers.signing import sample_event
from hookd.sources import Sources, parse_sources
from tests.support.admin import login
from tests.support.asgi import running_app
from tests.support.cli import hookd
from tests.support.constants import SECRETS
from tests.support.logcapture import Records, captured
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio
TOKEN = "ops-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HANDLER = "tests.support.handlers:value_error"


@pytest.fixture
def failing(tmp_path: Path) -> Sources:
    text = f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]
handlers = ["{HANDLER}"]
"""
    return parse_sources(text, tmp_path / "failing.toml", env={})


@pytest.fixture
def processing_log() -> Iterator[Records]:
    with captured("hookd.processing") as records:
        yield records


async def test_a_retrying_event_shows_its_handler_error_type_and_message(
    failing: Sources, db_url: str, processing_log: Records
) -> None:
    headers, body = sample_event("github", SECRETS["github"], 1)
    expected = {"message": f"{HANDLER}: ValueError: boom", "handler": HANDLER, "type": "ValueError"}
    # A backoff of up to an hour: the event stays retrying while it is looked at.
    settings: dict[str, Any] = {"retry_base_s": 3600, "retry_cap_s": 3600, "sweep_s": 0.05}
    async with running_app(failing, db_url, admin_token=TOKEN, **settings) as (_, client):
        accepted = await client.post("/hooks/github", content=body, headers=headers)
        event_id = accepted.json()["event_id"]
        seen: list[dict[str, Any]] = []

        async def failed_once() -> dict[str, Any]:
            seen.append((await client.get(f"/api/events/{event_id}", headers=AUTH)).json())
            return seen[-1] if seen[-1]["error"] is not None else {}

        resource = await wait_for(
            failed_once, timeout_s=20, interval_s=0.02, message=lambda: seen[-1]
        )
        assert resource["status"] == "retrying", resource
        assert not resource["done"]
        assert resource["error"] == expected

        await login(client, TOKEN)
        page = (await client.get(f"/admin/events/{event_id}")).text
        listed = (await client.get("/admin/events?status=retrying")).text
    for text in (page, listed):
        assert "ValueError: boom" in text
    assert HANDLER in page

    shown = hookd(db_url, "events", "show", event_id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["error"] == expected
    waited = hookd(db_url, "wait", event_id, "--timeout", "0.2", "--interval", "0.1")
    assert waited.returncode == 3
    assert "last error: " + expected["message"] in waited.stdout

    failed = [r for r in processing_log.about(event_id) if r.getMessage() == "handler failed"]
    assert failed, [r.getMessage() for r in processing_log.records]
    record = failed[0]
    fields = record.__dict__
    assert record.levelno == logging.WARNING
    assert (fields["handler"], fields["error_type"]) == (HANDLER, "ValueError")
    assert (fields["source"], fields["attempt"], fields["outcome"]) == ("github", 1, "retry")
    # The handler's message stays out of the log: it may quote the body.
    assert "boom" not in json.dumps(fields, default=str)
