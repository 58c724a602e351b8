"""`hookd send-test`: one line saying where it tried and what to do when no server
answers; and `--type TYPE --body FILE`, a chosen event type and body signed as the
provider signs, stored as such by a running `hookd serve`; a bad file is one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from hookd.providers import PROVIDERS
from hookd.providers.signing import chosen_event
from tests.support.cli import hookd
from tests.support.server import HookdServer, free_port

pytestmark = pytest.mark.anyio


# -- 9: a server that is not running -----------------------------------------------


def test_send_test_to_a_server_that_is_not_running_says_where_and_what_to_do(
    sqlite_url: str, sources_file: Path
) -> None:
    port = free_port()
    sent = hookd(
        sqlite_url, "send-test", "github", HOOKD_CONFIG=str(sources_file), HOOKD_PORT=str(port)
    )
    assert sent.returncode == 1
    [line] = sent.stderr.splitlines()
    assert line.startswith(f"hookd: cannot reach http://127.0.0.1:{port}/hooks/github: ")
    assert "hookd serve" in line and "HOOKD_PORT" in line and "--url" in line


# -- 19: send-test --type and --body ---------------------------------------------------


def test_send_test_sends_a_chosen_type_and_body_signed(
    sqlite_url: str, sources_file: Path, tmp_path: Path
) -> None:
    env = {"HOOKD_CONFIG": str(sources_file), "HOOKD_DATABASE_URL": sqlite_url}
    body = tmp_path / "charge.json"
    body.write_text(
        json.dumps(
            {
                "id": "evt_from_file_1",
                "object": "event",
                "type": "charge.refunded",
                "created": int(time.time()),
                "data": {"object": {"id": "ch_1", "object": "charge"}},
            }
        )
    )
    with HookdServer(env, tmp_path) as server:
        url = f"http://127.0.0.1:{server.port}"
        typed = hookd(
            sqlite_url,
            "send-test",
            "github",
            "--type",
            "pull_request",
            **env,
            HOOKD_PORT=str(server.port),
        )
        from_file = hookd(
            sqlite_url,
            "send-test",
            "stripe",
            "--body",
            str(body),
            **env,
            HOOKD_PORT=str(server.port),
        )
        stripe_typed = hookd(
            sqlite_url,
            "send-test",
            "stripe",
            "--type",
            "invoice.paid",
            "--url",
            f"{url}/hooks/stripe",
            **env,
        )
        server.stop()
    for result in (typed, from_file, stripe_typed):
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("202 "), result.stdout
    listed = hookd(sqlite_url, "events", "list", "--json", **env)
    types = {(e["source"], e["type"]) for e in map(json.loads, listed.stdout.splitlines())}
    assert ("github", "pull_request.opened") in types
    assert ("stripe", "charge.refunded") in types
    assert ("stripe", "invoice.paid") in types


def test_send_test_refuses_a_bad_body_file_in_one_line(
    sqlite_url: str, sources_file: Path, tmp_path: Path
) -> None:
    env = {"HOOKD_CONFIG": str(sources_file)}
    absent = tmp_path / "nope.json"
    missing = hookd(sqlite_url, "send-test", "stripe", "--body", str(absent), **env)
    assert missing.returncode == 2
    [line] = missing.stderr.splitlines()
    assert line.startswith(f"hookd: --body {absent}: cannot read it (")
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    said = hookd(sqlite_url, "send-test", "stripe", "--body", str(empty), **env)
    assert said.returncode == 2
    assert said.stderr.splitlines() == [
        f"hookd: --body {empty}: the file is empty; give the request body to send"
    ]
    body = tmp_path / "typed.json"
    body.write_text('{"type": "charge.refunded"}')
    clash = hookd(sqlite_url, "send-test", "stripe", "--body", str(body), "--type", "x", **env)
    assert clash.returncode == 2
    [line] = clash.stderr.splitlines()
    assert "takes the event type from the body's 'type'" in line
    # A provider whose samples are fixed says so (the CLI prints it as one line).
    with pytest.raises(ValueError, match=r"^shopify: only its built-in sample can be sent"):
        chosen_event(PROVIDERS["shopify"], "s", 1, int(time.time()), event_type="orders/paid")
