"""What a new user hits on the command line: an attempt's history line, `hookd wait` on
an event of a paused source, hints that name where a setting came from, and
`hookd replay`'s usage. Each runs the real command, as a user does."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from store.claims import history
from store.crypto import BodyCipher
from store.delivery.destinations import WHOLE_SOURCE, set_pause
from store.intake.events import insert_events
from store.models import EVENTS
from tests.support.cli import hookd, last_line
from tests.support.data import engine_of, new_event

pytestmark = pytest.mark.anyio


async def stored_event(url: str, source: str = "github") -> str:
    async with engine_of(url) as engine:
        async with engine.begin() as conn:
            [stored] = await insert_events(
                conn, [new_event(f"k-{time.monotonic_ns()}", source=source)], BodyCipher("")
            )
        return stored.event_id


# -- 4: an attempt's history says how long it took and when the next one is ---------


async def test_events_show_says_what_an_attempt_took_and_when_the_next_one_is(
    sqlite_url: str,
) -> None:
    event_id = await stored_event(sqlite_url)
    first = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    due = datetime(2026, 3, 1, 12, 0, 9, tzinfo=UTC)
    async with engine_of(sqlite_url) as engine, engine.begin() as conn:
        await history.record_attempts(
            conn,
            [
                history.Attempt(
                    event_id, 1, "w-1", first, "retry", first, 0.0062, "h", "boom", "E"
                ),
                history.Attempt(
                    event_id,
                    2,
                    "w-1",
                    first + timedelta(seconds=2),
                    "retry",
                    first + timedelta(seconds=2),
                    0.0071,
                    "h",
                    "boom",
                    "E",
                ),
            ],
        )
        await conn.execute(
            sa.update(EVENTS)
            .where(EVENTS.c.id == event_id)
            .values(status="retrying", attempts=2, next_attempt_at=due, last_error="boom")
        )
    shown = hookd(sqlite_url, "events", "show", event_id)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    past = lines[lines.index("history") + 1 :]
    assert "retry in" not in shown.stdout
    assert past[0].endswith(
        "attempt 1: retry; took 6.2 ms on w-1; next attempt at 2026-03-01T12:00:02Z; error: boom"
    ), past
    assert past[1].endswith(
        "attempt 2: retry; took 7.1 ms on w-1; next attempt at 2026-03-01T12:00:09Z; error: boom"
    ), past


# -- 16: wait on an event of a paused source says so ----------------------------------


async def test_wait_on_an_event_of_a_paused_source_says_it_is_paused(sqlite_url: str) -> None:
    event_id = await stored_event(sqlite_url)
    async with engine_of(sqlite_url) as engine, engine.begin() as conn:
        await set_pause(
            conn,
            "github",
            WHOLE_SOURCE,
            paused=True,
            by="cli user:ops",
            reason="deploy freeze",
            now=datetime(2026, 2, 4, 9, 30, tzinfo=UTC),
        )
    result = hookd(sqlite_url, "wait", event_id, "--timeout", "0.5", "--interval", "0.2")
    assert result.returncode == 3
    line = result.stdout.strip()
    assert line.startswith(f"{event_id} pending: not done after 0.5s"), line
    assert (
        "its source 'github' is paused (since 2026-02-04T09:30:00Z by cli user:ops: "
        "deploy freeze): it runs after `hookd sources resume github`"
    ) in line


# -- 9: hints name where the setting came from ---------------------------------------


def test_a_missing_config_file_names_the_option_or_variable_it_came_from(
    sqlite_url: str, tmp_path: Path, sources_file: Path
) -> None:
    absent = tmp_path / "missing.toml"
    by_option = hookd(sqlite_url, "--config", str(absent), "sources", "list")
    assert by_option.returncode == 2
    assert last_line(by_option.stderr) == (
        f"hookd: {absent}: sources file not found; check the path given to --config"
    )
    by_variable = hookd(sqlite_url, "sources", "list", HOOKD_CONFIG=str(absent))
    assert by_variable.returncode == 2
    assert "check HOOKD_CONFIG" in last_line(by_variable.stderr)
    empty = hookd(sqlite_url, "sources", "list", HOOKD_CONFIG="")
    assert empty.returncode == 2
    [line] = empty.stderr.splitlines()
    assert line.startswith("hookd: environment: HOOKD_CONFIG: is empty; set it to")
    assert "directory" not in line
    directory = hookd(sqlite_url, "--config", str(tmp_path), "sources", "list")
    assert directory.returncode == 2
    assert last_line(directory.stderr) == (f"hookd: {tmp_path}: is a directory, not a sources file")


# -- 18: replay's usage shows every form ----------------------------------------------


def test_replay_without_arguments_shows_every_form(sqlite_url: str) -> None:
    bare = hookd(sqlite_url, "replay")
    assert bare.returncode == 2
    line = last_line(bare.stderr)
    assert "hookd replay EVENT_ID ..." in line
    assert "--source S --status dead" in line
    assert "hookd replay --since TIME" in line
    alone = hookd(sqlite_url, "replay", "--source", "github")
    assert alone.returncode == 2
    assert "--since TIME" in last_line(alone.stderr)
    assert "--status dead" in last_line(alone.stderr)
    helped = hookd(sqlite_url, "replay", "--help")
    assert re.search(
        r"usage: hookd replay EVENT_ID \.\.\.\n\s+hookd replay --source", helped.stdout
    )
    assert "hookd replay --since TIME" in helped.stdout
