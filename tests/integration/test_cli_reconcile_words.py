"""Reconciliation as the command line words it: `hookd coverage` names each hole for
what it is and takes a recent `--since`; `hookd sources list` and `hookd reconcile`
print cursors as ISO 8601 and a paused source's reason. Each runs the real command."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from store.delivery.destinations import WHOLE_SOURCE, set_pause
from store.reconcile import coverage as ledger
from store.reconcile import runs as rstate
from store.status import CoverageOutcome
from tests.support.cli import hookd, last_line
from tests.support.constants import SECRETS, SOURCES_TOML
from tests.support.data import engine_of

pytestmark = pytest.mark.anyio

# A reconciled Stripe source beside the usual four (nothing is ever run against it).
RECONCILED_TOML = (
    SOURCES_TOML
    + f"""
[[sources]]
name = "billing"
provider = "stripe"
secrets = ["{SECRETS["stripe"]}"]

[sources.reconcile]
api_url = "http://127.0.0.1:9"
allow_insecure = true
token = "sk_test_hookd"
"""
)


# -- 6: coverage words each case for what it is; a recent --since works ------------


async def test_coverage_of_a_source_no_run_has_covered_says_so(
    sqlite_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "hookd.toml"
    config.write_text(RECONCILED_TOML)
    env = {"HOOKD_CONFIG": str(config)}
    report = hookd(sqlite_url, "coverage", "billing", "--since", "2h", "--until", "1h", **env)
    assert report.returncode == 1, report.stderr
    assert "no run covered this yet" in report.stdout
    assert "a run that died" not in report.stdout

    # The newest part: younger than the settle window, judged later. Up to now,
    # not refused for being after the default end (now less the settle window).
    recent = hookd(sqlite_url, "coverage", "billing", "--since", "30s", "--json", **env)
    assert recent.returncode == 3, recent.stderr
    shown = json.loads(recent.stdout)
    [hole] = shown["intervals"]
    assert [r["kind"] for r in hole["reasons"]] == ["settling"]
    settle = shown["settle_s"]
    assert hole["reasons"][0]["detail"].startswith(
        f"not judged yet: younger than the settle window ({settle:g} s)"
    )
    future = hookd(sqlite_url, "coverage", "billing", "--since", "2099-01-01T00:00:00Z", **env)
    assert future.returncode == 2
    assert last_line(future.stderr) == "hookd: since must be before now"


async def test_coverage_after_enable_and_a_good_run_does_not_say_disabled(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The window a disable left is recorded up to the enable; a good run after it moves
    the cursor into it. What is left from the cursor on is the next run's work."""
    config = tmp_path / "hookd.toml"
    config.write_text(RECONCILED_TOML)
    now = datetime.now(UTC)
    old_cursor = now - timedelta(hours=6)
    good_until = now - timedelta(minutes=20)  # the good run's end (its now less settle)
    async with engine_of(sqlite_url) as engine, engine.begin() as conn:
        await rstate.ensure_state(conn, "billing", now)
        await rstate.update_state(conn, "billing", None, cursor=good_until.timestamp())
        await ledger.record(
            conn,
            source="billing",
            start=old_cursor - timedelta(hours=1),
            end=old_cursor,
            outcome=CoverageOutcome.COMPLETE,
            now=old_cursor,
        )
        await ledger.record(
            conn,
            source="billing",
            start=old_cursor,
            end=now - timedelta(minutes=10),
            outcome=CoverageOutcome.NOT_CHECKED,
            now=now - timedelta(minutes=10),
            reason="reconciliation disabled: key rotation",
        )
        await ledger.record(
            conn,
            source="billing",
            start=old_cursor - timedelta(minutes=1),
            end=good_until,
            outcome=CoverageOutcome.COMPLETE,
            now=now - timedelta(minutes=9),
        )
    report = hookd(
        sqlite_url, "coverage", "billing", "--since", "3h", "--json", HOOKD_CONFIG=str(config)
    )
    assert report.returncode == 3, (report.stdout, report.stderr)
    holes = [i for i in json.loads(report.stdout)["intervals"] if i["state"] == "hole"]
    kinds = [r["kind"] for h in holes for r in h["reasons"]]
    assert kinds and set(kinds) <= {"pending", "settling"}, holes


# -- 5 and 7: sources list and reconcile print times as ISO 8601, and pause reasons ---


async def test_sources_list_shows_the_cursor_as_iso_and_the_pause_reason(
    sqlite_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "hookd.toml"
    config.write_text(RECONCILED_TOML)
    cursor = datetime(2026, 2, 3, 4, 5, 6, 500000, tzinfo=UTC)
    async with engine_of(sqlite_url) as engine, engine.begin() as conn:
        await rstate.ensure_state(conn, "billing", cursor)
        await rstate.update_state(conn, "billing", None, cursor=cursor.timestamp())
        await set_pause(
            conn,
            "github",
            WHOLE_SOURCE,
            paused=True,
            by="cli user:ops",
            reason="handler bug #12",
            now=datetime(2026, 2, 4, tzinfo=UTC),
        )
    listed = hookd(sqlite_url, "sources", "list", HOOKD_CONFIG=str(config))
    assert listed.returncode == 0, listed.stderr
    [billing] = [line for line in listed.stdout.splitlines() if line.startswith("billing ")]
    assert "2026-02-03T04:05:06.500000Z" in billing
    assert str(cursor.timestamp()) not in listed.stdout
    [github] = [line for line in listed.stdout.splitlines() if line.startswith("github ")]
    assert "paused (since 2026-02-04T00:00:00Z, by cli user:ops): handler bug #12" in github, github
    # JSON keeps the number: the documented field is unix seconds.
    as_json = hookd(sqlite_url, "sources", "list", "--json", HOOKD_CONFIG=str(config))
    [entry] = [e for e in map(json.loads, as_json.stdout.splitlines()) if e["name"] == "billing"]
    assert entry["reconcile"]["cursor"] == cursor.timestamp()


def test_a_run_line_shows_its_cursors_as_iso() -> None:
    from types import SimpleNamespace

    from hookd.cli.reconcile import describe_outcome

    outcome = SimpleNamespace(
        source="billing",
        status="succeeded",
        run_id="R",
        checked=1,
        missing=0,
        repaired=0,
        cursor_before=1770000000.25,
        cursor_after=1770000600.0,
        ack_violations=0,
        registration_problems=(),
        registration_unread=None,
        unjudged=0,
    )
    line = describe_outcome(outcome, dry_run=False)
    assert "cursor=2026-02-02T02:40:00.250000Z->2026-02-02T02:50:00Z" in line, line
    assert "unjudged" not in line
    outcome.unjudged = 2
    line = describe_outcome(outcome, dry_run=False)
    assert line.endswith("unjudged=2 (window left a hole; see hookd coverage)"), line
