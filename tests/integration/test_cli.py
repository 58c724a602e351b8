"""``hookd wait``, ``hookd replay`` and ``hookd events`` as a user runs them."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
import sqlalchemy as sa

from store.crypto import BodyCipher
from store.intake.events import insert_events
from store.models import EVENTS
from tests.support.cli import hookd
from tests.support.data import engine_of, new_event
from tests.support.server import ROOT, HookdServer, HookdWorker, free_port

pytestmark = pytest.mark.anyio


async def add(url: str, status: str, error: str | None = None) -> str:
    async with engine_of(url) as engine:
        async with engine.begin() as conn:
            [stored] = await insert_events(
                conn, [new_event(f"k-{time.monotonic_ns()}")], BodyCipher("")
            )
            await conn.execute(
                sa.update(EVENTS)
                .where(EVENTS.c.id == stored.event_id)
                .values(status=status, last_error=error, attempts=0 if status == "pending" else 8)
            )
        return stored.event_id


async def snapshot(url: str) -> list[tuple[object, ...]]:
    async with engine_of(url) as engine, engine.connect() as conn:
        return [tuple(r) for r in await conn.execute(sa.select(EVENTS).order_by(EVENTS.c.id))]


async def test_wait_exits_0_when_processed(db_url: str) -> None:
    event_id = await add(db_url, "processed")
    result = hookd(db_url, "wait", event_id, "--timeout", "5")
    assert (result.returncode, result.stdout.strip()) == (0, f"{event_id} processed")


async def test_wait_exits_1_when_dead_and_prints_the_error(db_url: str) -> None:
    event_id = await add(db_url, "dead", "h: RuntimeError: boom")
    result = hookd(db_url, "wait", event_id, "--timeout", "5")
    assert result.returncode == 1
    assert "boom" in result.stdout


async def test_wait_exits_3_at_the_deadline_and_changes_nothing(db_url: str) -> None:
    event_id = await add(db_url, "pending")
    before = await snapshot(db_url)
    started = time.monotonic()
    result = hookd(db_url, "wait", event_id, "--timeout", "1.5", "--interval", "0.2")
    elapsed = time.monotonic() - started
    assert result.returncode == 3
    assert result.stdout.strip().startswith(f"{event_id} pending")
    assert 1.5 <= elapsed < 15
    assert await snapshot(db_url) == before, "wait must not touch or resubmit anything"


async def test_wait_exits_4_for_an_unknown_event(sqlite_url: str) -> None:
    result = hookd(sqlite_url, "wait", "01J0000000000000000000000A", "--timeout", "5")
    assert result.returncode == 4


@pytest.mark.parametrize(
    "args",
    [
        ["--timeout", "0"],
        ["--timeout", "-1"],
        ["--timeout", "inf"],
        ["--timeout", "nan"],
        ["--interval", "0"],
        ["--interval", "abc"],
    ],
)
def test_wait_refuses_bad_durations_with_exit_2(sqlite_url: str, args: list[str]) -> None:
    result = hookd(sqlite_url, "wait", "01J0000000000000000000000A", *args)
    assert result.returncode == 2
    assert "must be finite and positive" in result.stderr or "not a number" in result.stderr


async def test_replay_cli_resets_dead_events_of_a_source(db_url: str) -> None:
    dead = [await add(db_url, "dead", "x") for _ in range(3)]
    done = await add(db_url, "processed")
    result = hookd(db_url, "replay", "--source", "github", "--status", "dead")
    assert result.returncode == 0, result.stderr
    assert sorted(line.split()[0] for line in result.stdout.splitlines()) == sorted(dead)
    rows = {r[0]: r for r in await snapshot(db_url)}
    status_col = [c.name for c in EVENTS.c].index("status")
    assert {rows[i][status_col] for i in dead} == {"pending"}
    assert rows[done][status_col] == "processed"


async def test_replay_cli_reports_unknown_ids(sqlite_url: str) -> None:
    result = hookd(sqlite_url, "replay", "01J0000000000000000000000A")
    assert result.returncode == 1
    assert "no event" in result.stderr


def test_replay_cli_needs_ids_or_a_source_and_status(sqlite_url: str) -> None:
    assert hookd(sqlite_url, "replay").returncode == 2
    assert hookd(sqlite_url, "replay", "--source", "github").returncode == 2


async def test_events_list_and_show(sqlite_url: str, tmp_path: Path) -> None:
    event_id = await add(sqlite_url, "pending")
    listed = hookd(sqlite_url, "events", "list", "--json", "--limit", "5")
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [event_id]
    table = hookd(sqlite_url, "events", "list")
    assert event_id in table.stdout
    assert table.stdout.startswith("ID")
    shown = json.loads(hookd(sqlite_url, "events", "show", event_id, "--json").stdout)
    assert shown["name"] == f"events/{event_id}"
    assert hookd(sqlite_url, "events", "show", "nope").returncode == 1
    assert hookd(sqlite_url, "events", "list", "--limit", "0").returncode == 2


async def test_control_characters_from_senders_never_reach_the_terminal(sqlite_url: str) -> None:
    """An event stored before types were kept in a safe form, and a handler error that
    quotes a payload: their escape sequences and carriage returns are printed as visible
    ``\\uXXXX``, in tables, details, history, ``wait`` and JSON alike."""
    hostile = "x\x1b]0;pwned\x07\x1b[2J\rspoof\u202e\x85"
    event_id = await add(sqlite_url, "dead", error=f"boom {hostile}")
    async with engine_of(sqlite_url) as engine, engine.begin() as conn:
        await conn.execute(sa.update(EVENTS).where(EVENTS.c.id == event_id).values(type=hostile))
    outputs = [
        hookd(sqlite_url, "events", "list").stdout,
        hookd(sqlite_url, "events", "show", event_id).stdout,
        hookd(sqlite_url, "wait", event_id, "--timeout", "1").stdout,
        hookd(sqlite_url, "events", "list", "--json").stdout,
    ]
    for n, out in enumerate(outputs):
        assert event_id in out, (n, out)
        for bad in ("\x1b", "\x07", "\r", "\u202e", "\x85"):
            assert bad not in out, (bad, out)
    assert "x\\u001b]0;pwned\\u0007\\u001b[2J\\u000dspoof\\u202e\\u0085" in outputs[0]
    assert json.loads(outputs[3].splitlines()[0])["type"] == hostile  # still JSON


def test_worker_without_redis_is_a_clear_error(sqlite_url: str) -> None:
    result = hookd(sqlite_url, "worker")
    assert result.returncode == 2
    assert "HOOKD_REDIS_URL" in result.stderr


def test_serve_refuses_an_unmigrated_database(tmp_path: Path, sources_file: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    result = hookd(url, "serve", "--port", "1", HOOKD_CONFIG=str(sources_file))
    assert result.returncode == 2
    assert "hookd db upgrade" in result.stderr


def test_sources_enable_refuses_a_source_without_reconciliation(
    sqlite_url: str, sources_file: Path
) -> None:
    result = hookd(sqlite_url, "sources", "enable", "github", HOOKD_CONFIG=str(sources_file))
    assert result.returncode == 2
    assert "has no [sources.reconcile] table" in result.stderr
    unknown = hookd(sqlite_url, "sources", "enable", "nope", HOOKD_CONFIG=str(sources_file))
    assert unknown.returncode == 2
    assert "no source named 'nope'" in unknown.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_refuses_a_taken_port_in_one_line_before_announcing(
    sqlite_url: str, sources_file: Path, workers: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = hookd(
            sqlite_url,
            "serve",
            "--port",
            str(port),
            "--workers",
            workers,
            HOOKD_CONFIG=str(sources_file),
            HOOKD_LOG_LEVEL="INFO",
        )
    assert result.returncode == 2, result.stderr
    assert "serving on" not in result.stdout + result.stderr
    [line] = result.stderr.splitlines()
    assert f"127.0.0.1:{port}" in line


def test_serve_refuses_bad_encryption_keys_before_announcing(
    sqlite_url: str, sources_file: Path
) -> None:
    key = "not-a-fernet-key-7c2e"
    result = hookd(
        sqlite_url,
        "serve",
        "--port",
        str(free_port()),
        HOOKD_CONFIG=str(sources_file),
        HOOKD_ENCRYPTION_KEYS=key,
        HOOKD_LOG_LEVEL="INFO",
    )
    assert result.returncode == 2, result.stderr
    assert "serving on" not in result.stdout + result.stderr
    [line] = result.stderr.splitlines()
    assert "HOOKD_ENCRYPTION_KEYS" in line
    assert key not in line


def test_serve_and_worker_warn_at_start_that_redis_is_unreachable(
    sqlite_url: str, sources_file: Path, tmp_path: Path
) -> None:
    password = "redis-pass-9b1f"
    closed = free_port()
    env = {
        "HOOKD_CONFIG": str(sources_file),
        "HOOKD_DATABASE_URL": sqlite_url,
        "HOOKD_REDIS_URL": f"redis://:{password}@127.0.0.1:{closed}/0",
    }
    shown = f"redis=redis://:***@127.0.0.1:{closed}/0"
    with HookdServer(env, tmp_path) as server:
        # Checked before "serving on", so it is in the log once /healthz answers.
        lines = server.log_path.read_text().splitlines()
        server.stop()
    [warning] = [line for line in lines if "Redis is unreachable" in line]
    assert lines.index(warning) < next(i for i, li in enumerate(lines) if "serving on" in li)
    assert shown in warning
    assert "error=ConnectionError" in warning
    assert "wake-ups are lost" in warning
    assert password not in server.log_path.read_text()

    with HookdWorker(env, tmp_path) as worker:
        warning = worker.wait_for_line(lambda line: "Redis is unreachable" in line)
        worker.stop()
    assert shown in warning
    assert "processing from the database" in warning
    assert password not in worker.log_path.read_text()


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("HOOKD_LOG_LEVEL", "LOUD", "use one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        ("HOOKD_REDIS_URL", "notaurl", "use redis://HOST:PORT/DB"),
        ("HOOKD_LEASE_S", "10", "HOOKD_HANDLER_TIMEOUT_S=30 (the default)"),
    ],
)
def test_bad_setting_is_one_line_and_exit_2(
    sqlite_url: str, variable: str, value: str, expected: str
) -> None:
    result = hookd(sqlite_url, "events", "list", **{variable: value})
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"hookd: environment: {variable}")
    assert expected in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr


async def add_many(url: str, count: int) -> None:
    async with engine_of(url) as engine, engine.begin() as conn:
        await insert_events(conn, [new_event(f"many-{i}") for i in range(count)], BodyCipher(""))


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_events_list_into_a_closed_pipe_stops_quietly(sqlite_url: str, as_json: bool) -> None:
    """`hookd events list | head -1`: far more output than a pipe holds (64 KiB), and a
    reader that leaves after one line."""
    asyncio.run(add_many(sqlite_url, 2000))
    args = ["events", "list", "--limit", "2000", *(["--json"] if as_json else [])]
    with subprocess.Popen(
        [sys.executable, "-m", "hookd.cli", *args],
        env={**os.environ, "HOOKD_DATABASE_URL": sqlite_url, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()
        stderr = proc.stderr.read().decode()
        returncode = proc.wait(timeout=60)
    assert first.strip()
    assert returncode in (0, 141), stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert "Exception ignored" not in stderr, stderr


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    result = hookd(f"sqlite+aiosqlite:///{tmp_path / 'unused.db'}", "--version")
    assert (result.returncode, result.stdout) == (0, f"hookd {metadata.version('hookd')}\n")


def test_config_option_wins_over_hookd_config(
    sqlite_url: str, sources_file: Path, tmp_path: Path
) -> None:
    absent = tmp_path / "absent.toml"
    listed = hookd(
        sqlite_url, "--config", str(sources_file), "sources", "list", "--json",
        HOOKD_CONFIG=str(absent),
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    names = [json.loads(line)["name"] for line in listed.stdout.splitlines()]
    assert names == ["github", "stripe", "slack", "standard"]
    missing = hookd(
        sqlite_url, "--config", str(absent), "sources", "list", HOOKD_CONFIG=str(sources_file)
    )
    assert missing.returncode == 2
    assert f"{absent}: sources file not found" in missing.stderr


def test_wait_help_lists_the_exit_codes(tmp_path: Path) -> None:
    result = hookd(f"sqlite+aiosqlite:///{tmp_path / 'unused.db'}", "wait", "--help")
    assert result.returncode == 0
    lines = [line.strip() for line in result.stdout.splitlines()]
    for code, meaning in [
        (0, "the event was processed"),
        (1, "the event is dead"),
        (2, "usage or configuration error"),
        (3, "not done when --timeout passed"),
        (4, "no such event"),
    ]:
        assert any(line.startswith(f"{code}  {meaning}") for line in lines), result.stdout


def test_help_shows_defaults(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'unused.db'}"

    def help_of(*command: str) -> str:
        result = hookd(url, *command, "--help", COLUMNS="200")  # no wrapping mid-phrase
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert "(default: $HOOKD_HOST, else 127.0.0.1)" in help_of("serve")
    assert "(default: $HOOKD_PORT, else 8000)" in help_of("serve")
    assert "(default: 60)" in help_of("wait") and "(default: 1)" in help_of("wait")
    events_list = help_of("events", "list")
    assert "(default: 50)" in events_list
    assert "print JSON Lines" in events_list
    assert "$HOOKD_CONFIG" in help_of()


def test_send_test_default_url_follows_hookd_port_like_serve(
    sqlite_url: str, sources_file: Path, tmp_path: Path
) -> None:
    env = {"HOOKD_CONFIG": str(sources_file), "HOOKD_DATABASE_URL": sqlite_url}
    server = HookdServer(env, tmp_path)
    # No --port: serve listens on HOOKD_PORT, as scripts/quickstart.sh sets it.
    server.args = ["serve"]
    server.env["HOOKD_PORT"] = str(server.port)
    with server:
        sent = hookd(sqlite_url, "send-test", "github", **env, HOOKD_PORT=str(server.port))
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith("202 "), sent.stdout


def test_send_test_refuses_a_hookd_port_that_is_not_a_port(
    sqlite_url: str, sources_file: Path
) -> None:
    sent = hookd(
        sqlite_url, "send-test", "github",
        HOOKD_CONFIG=str(sources_file), HOOKD_PORT="tcp://10.0.0.1:8000",
    )  # fmt: skip
    assert sent.returncode == 2
    assert sent.stderr.startswith("hookd: environment: HOOKD_PORT: ")
    assert "--url" in sent.stderr and len(sent.stderr.splitlines()) == 1
