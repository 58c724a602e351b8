"""Logs of a real ``hookd serve`` with ``HOOKD_LOG_JSON=true``: one JSON object a line,
ids on every event line, and never a payload, a secret or the admin token."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from hookd.providers.signing import sample_event
from tests.support.constants import SECRETS
from tests.support.destinations import whsec
from tests.support.server import HookdServer, HookdWorker, RedisServer
from tests.support.waiting import wait_for_sync

TOKEN = "log-test-admin-token-6d1f"


def test_json_logs_carry_ids_and_no_payload_or_secret(tmp_path: Path, sqlite_url: str) -> None:
    config = tmp_path / "logs.toml"
    config.write_text(
        f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]
handlers = ["tests.support.handlers:echo_failure"]
max_attempts = 2
"""
    )
    env = {
        "HOOKD_CONFIG": str(config),
        "HOOKD_DATABASE_URL": sqlite_url,
        "HOOKD_ADMIN_TOKEN": TOKEN,
        "HOOKD_LOG_JSON": "true",
        "HOOKD_LOG_LEVEL": "INFO",
        "HOOKD_RETRY_BASE_S": "0.05",
        "HOOKD_RETRY_CAP_S": "0.1",
        "HOOKD_SWEEP_S": "0.2",
    }
    requests = [sample_event("github", SECRETS["github"], i) for i in range(5)]
    with HookdServer(env, tmp_path) as server:
        ids = []
        for headers, body in requests:
            response = httpx.post(server.url + "/hooks/github", content=body, headers=headers)
            assert response.status_code == 202
            ids.append(response.json()["event_id"])
        headers, body = requests[0]
        assert httpx.post(server.url + "/hooks/github", content=body, headers=headers).is_success
        forged_headers, forged_body = sample_event("github", "wrong-secret", 99)
        response = httpx.post(
            server.url + "/hooks/github", content=forged_body, headers=forged_headers
        )
        assert response.status_code == 401

        def dead() -> list[Any] | None:
            api = httpx.get(
                server.url + "/api/events?status=dead", headers={"Authorization": f"Bearer {TOKEN}"}
            )
            events: list[Any] = api.json()["events"]
            return events if len(events) >= len(ids) else None

        should = "every event should have died (max_attempts=2)"
        died = wait_for_sync(dead, timeout_s=30, interval_s=0.2, message=should)
        assert len(died or ()) == len(ids), should
        server.stop()
        text = server.log_path.read_text()

    lines = [line for line in text.splitlines() if line.startswith("{")]
    records = [json.loads(line) for line in lines]
    assert records, text
    for record in records:
        assert {"ts", "level", "logger", "msg"} <= record.keys()
    accepted = [r for r in records if r["msg"] == "accepted"]
    assert sorted(r["event_id"] for r in accepted) == sorted(ids)
    assert all(r["source"] == "github" for r in accepted)
    failed = [r for r in records if r["msg"] == "handler failed"]
    assert {r["event_id"] for r in failed} == set(ids)
    assert {r["outcome"] for r in failed} == {"retry", "dead"}
    # Which handler failed and how, on every attempt (the message stays out: see below).
    assert {(r["handler"], r["error_type"]) for r in failed} == {
        ("tests.support.handlers:echo_failure", "RuntimeError")
    }
    assert {r["attempt"] for r in failed} == {1, 2}

    # Nothing secret or from a payload: the signing secret, the token, the bodies
    # (the handler's exception message is the body itself) and signature headers.
    assert SECRETS["github"] not in text
    assert TOKEN not in text
    for headers, body in [*requests, (forged_headers, forged_body)]:
        assert headers["X-Hub-Signature-256"] not in text
        assert json.loads(body)["repository"]["full_name"] not in text
    assert "logically awesome" not in text


def test_serve_with_two_workers_logs_from_each_receiver_process_as_json(
    tmp_path: Path, sqlite_url: str, sources_file: Path
) -> None:
    """The receiver processes uvicorn spawns configure logging themselves: before, the
    log of ``serve --workers 2`` held only the parent's "serving on" line."""
    env = {
        "HOOKD_CONFIG": str(sources_file),
        "HOOKD_DATABASE_URL": sqlite_url,
        "HOOKD_LOG_JSON": "true",
        "HOOKD_LOG_LEVEL": "INFO",
    }
    headers, body = sample_event("github", SECRETS["github"], 1)
    with HookdServer(env, tmp_path, workers=2) as server:
        assert server.proc is not None
        parent = server.proc.pid
        response = httpx.post(server.url + "/hooks/github", content=body, headers=headers)
        assert response.status_code == 202
        event_id = response.json()["event_id"]
        line = server.wait_for_line(lambda line: event_id in line and '"accepted"' in line)
        started: set[int] = set()

        def second_receiver_started(line: str) -> bool:
            if line.startswith("{") and json.loads(line)["msg"] == "receiver started":
                started.add(json.loads(line)["pid"])
            return len(started) == 2

        server.wait_for_line(second_receiver_started)
        server.stop()
        text = server.log_path.read_text()

    accepted = json.loads(line)
    assert accepted["msg"] == "accepted"
    assert (accepted["event_id"], accepted["source"]) == (event_id, "github")
    assert accepted["pid"] != parent, "the parent only supervises; a receiver process accepts"
    assert parent not in started
    # Nothing falls to Python's bare last-resort output: every line is a JSON record,
    # or one of the CLI's own "hookd: ..." lines.
    for other in text.splitlines():
        assert other.startswith(("{", "hookd: ")), other


HANDLER = "tests.support.handlers:logs_its_own"


def _handler_env(tmp_path: Path, url: str, extra: str = "", **settings: str) -> dict[str, str]:
    """hookd on ``url`` with the handler's sources file (``extra`` added to it), the
    admin token and INFO logs; ``settings`` add to that or override it."""
    return {
        "HOOKD_CONFIG": str(_handler_sources(tmp_path, extra)),
        "HOOKD_DATABASE_URL": url,
        "HOOKD_ADMIN_TOKEN": TOKEN,
        "HOOKD_LOG_LEVEL": "INFO",
        **settings,
    }


def _handler_sources(tmp_path: Path, extra: str = "") -> Path:
    config = tmp_path / "handler-logs.toml"
    config.write_text(
        f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]
handlers = ["{HANDLER}"]
max_attempts = 1
{extra}"""
    )
    return config


def _fields(line: str) -> dict[str, str]:
    """The key=value fields of a key=value line."""
    return dict(re.findall(r"(\w+)=(\S+)", line))


def _send_one(server: HookdServer) -> tuple[str, str]:
    """One signed GitHub event to ``server``: its id and its type (from the API)."""
    headers, body = sample_event("github", SECRETS["github"], 1)
    response = httpx.post(server.url + "/hooks/github", content=body, headers=headers)
    assert response.status_code == 202, response.text
    event_id: str = response.json()["event_id"]
    auth = {"Authorization": f"Bearer {TOKEN}"}
    event = httpx.get(f"{server.url}/api/events/{event_id}", headers=auth).json()
    return event_id, event["type"]


def _assert_stopped_in_order(
    lines: list[str], event_id: str, stopping_at: str, draining_at: str, stopped_at: str
) -> None:
    """A stop on SIGTERM logged in order: stopping, draining the one event in flight,
    its handler done (it had its grace), stopped after at least a second."""

    def index(wanted: str) -> int:
        [found] = [i for i, line in enumerate(lines) if f" info {wanted} " in line]
        return found

    stopping, draining, stopped = index(stopping_at), index(draining_at), index(stopped_at)
    [done] = [i for i, line in enumerate(lines) if "handler done" in line]
    assert stopping < draining < done < stopped, lines
    assert _fields(lines[stopping])["signal"] == "SIGTERM"
    assert _fields(lines[draining])["events"] == "1"
    assert _fields(lines[done])["event_id"] == event_id
    assert float(_fields(lines[stopped])["took_s"]) >= 1.0, lines[stopped]


def test_a_handlers_own_log_lines_carry_its_events_ids(tmp_path: Path, sqlite_url: str) -> None:
    """A handler logging under its own module's name (not "hookd"): before, its INFO
    went nowhere and its warning came out bare, through Python's last resort."""
    env = _handler_env(tmp_path, sqlite_url)
    with HookdServer(env, tmp_path) as server:
        event_id, event_type = _send_one(server)
        server.wait_for_line(lambda line: "handler warns from a task" in line)
        server.stop()
        lines = server.log_path.read_text().splitlines()

    ids = {
        "event_id": event_id,
        "source": "github",
        "type": event_type,
        "attempt": "1",
        "handler": HANDLER,
    }
    [hello] = [line for line in lines if "handler says hello" in line]
    assert " info tests.support.handlers handler says hello " in hello, hello
    assert _fields(hello).items() >= {**ids, "size": _fields(hello)["size"]}.items(), hello
    # From a task the handler started: the ids went with it.
    [warned] = [line for line in lines if "handler warns from a task" in line]
    assert " warning tests.support.handlers " in warned, warned
    assert _fields(warned).items() >= ids.items(), warned
    # At HOOKD_LOG_LEVEL (INFO): not its DEBUG line.
    assert not [line for line in lines if "handler debug line" in line]
    # hookd's own lines are printed once (they do not also reach the root logger's
    # handler), and outside a handler they carry only their own fields.
    [accepted] = [line for line in lines if " accepted " in line and event_id in line]
    assert "handler=" not in accepted, accepted


def test_json_logs_are_json_from_start_to_stop(tmp_path: Path, sqlite_url: str) -> None:
    """With HOOKD_LOG_JSON=true every line serve writes parses: its own lines at start
    ("serving on", a start-up warning) and at stop, a handler's records with the ids."""
    forward = (
        f'[sources.forward]\nurl = "https://127.0.0.1:9/forward"\nsecret = "{whsec("forward")}"\n'
    )
    env = _handler_env(tmp_path, sqlite_url, extra=forward, HOOKD_LOG_JSON="true")
    with HookdServer(env, tmp_path) as server:
        event_id, event_type = _send_one(server)
        server.wait_for_line(lambda line: "handler warns from a task" in line)
        server.stop()
        text = server.log_path.read_text()

    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not a JSON record: {line!r}\n{text}") from None
    for record in records:
        assert {"ts", "level", "logger", "msg", "pid"} <= record.keys(), record
    by_msg = {r["msg"]: r for r in records}
    [serving] = [r for r in records if r["msg"].startswith("serving on http://127.0.0.1:")]
    assert (serving["level"], serving["logger"]) == ("info", "hookd.cli")
    [warning] = [r for r in records if "127.0.0.1 is" in r["msg"]]
    assert (warning["level"], warning["logger"]) == ("warning", "hookd.cli")
    hello = by_msg["handler says hello"]
    assert hello["logger"] == "tests.support.handlers"
    assert (hello["event_id"], hello["source"], hello["type"], hello["attempt"]) == (
        event_id,
        "github",
        event_type,
        1,
    )
    assert by_msg["handler warns from a task"]["event_id"] == event_id
    assert by_msg["stopping"]["signal"] == "SIGTERM"
    assert "took_s" in by_msg["stopped"]


def test_serve_logs_its_stop_the_drain_and_how_long_it_took(
    tmp_path: Path, sqlite_url: str
) -> None:
    """SIGTERM while a handler runs: the signal, what is drained, and "stopped"; before,
    serve stopped without a line."""
    env = _handler_env(tmp_path, sqlite_url, TEST_HANDLER_SLEEP_S="1.5")
    with HookdServer(env, tmp_path) as server:
        event_id, _ = _send_one(server)
        server.wait_for_line(lambda line: "handler sleeping" in line)
        server.stop()
        assert server.exited_by_itself(), server.log()
        lines = server.log_path.read_text().splitlines()

    # The handler in flight had its grace: it finished before serve stopped.
    _assert_stopped_in_order(
        lines, event_id, "hookd.serve stopping", "hookd.app draining", "hookd.serve stopped"
    )


@pytest.mark.postgres
@pytest.mark.redis
def test_worker_logs_its_stop_the_drain_and_how_long_it_took(tmp_path: Path, pg_url: str) -> None:
    env = _handler_env(tmp_path, pg_url, TEST_HANDLER_SLEEP_S="1.5")
    with RedisServer(tmp_path) as redis:
        env["HOOKD_REDIS_URL"] = redis.url
        with HookdServer(env, tmp_path) as server, HookdWorker(env, tmp_path) as worker:
            worker.wait_started()
            event_id, _ = _send_one(server)
            worker.wait_for_line(lambda line: "handler sleeping" in line)
            worker.stop()
            assert worker.exited_by_itself(), worker.log()
            lines = worker.log_path.read_text().splitlines()

    _assert_stopped_in_order(
        lines, event_id, "hookd.worker stopping", "hookd.worker draining", "hookd.worker stopped"
    )
